"""The processes of a launch agree on what they train before they train: a node started with another data seed is
refused on every node with one ``error:`` line naming the process and the differing key. Before: both trained, each
on its own dataset (a mix of two), and the launch exited 0. Nodes that do not see one run directory (each its own
disk) are refused too; before, they trained and left checkpoints that could not restore the second process."""

from __future__ import annotations

import re

import pytest

CONFIG = """
seed: 3
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: synthetic-birds, image_size: 32, batch_size: 4, eval_batch_size: 8, options: {n: 16, size: 32, seed: 1}}
optim: {epochs: 1}
eval: {num_images: 0}
"""


@pytest.mark.slow
def test_a_node_with_another_data_seed_is_refused_on_every_node(tmp_path, launch):
    (tmp_path / "config.yaml").write_text(CONFIG)
    results = launch(["train", "--config", str(tmp_path / "config.yaml"), f"output_dir={tmp_path / 'run'}"], nodes=2,
                     node_args=[[], ["data.options.seed=2"]], check=False)
    for result in results:
        errors = [line for line in result.stderr.splitlines() if "error: " in line]
        assert result.returncode != 0 and len(errors) == 1, result.stderr[-3000:]
        assert re.search(r"error: the processes of this launch would not train the same run: process 1's config "
                         r"differs from process 0's \(data\.options\.seed: [12] != [12]\)", errors[0]), errors[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_nodes_that_do_not_share_the_run_directory_are_refused_on_every_node(tmp_path, launch):
    """Two nodes whose ``output_dir`` is not one directory (here: another path on each, as two disks of their own
    would be); the path alone may differ (a file system mounted elsewhere), so it is not what is compared."""
    (tmp_path / "config.yaml").write_text(CONFIG)
    results = launch(["train", "--config", str(tmp_path / "config.yaml")], nodes=2,
                     node_args=[[f"output_dir={tmp_path / 'node-0'}"], [f"output_dir={tmp_path / 'node-1'}"]],
                     check=False)
    for result in results:
        errors = [line for line in result.stderr.splitlines() if "error: " in line]
        assert result.returncode != 0 and len(errors) == 1, result.stderr[-3000:]
        assert re.search(r"node-[01] is not one directory for all 2 processes: process\(es\) \[1\] do not see the "
                         r"file process 0 wrote there .*a file system they share", errors[0]), errors[0]
    assert not list(tmp_path.glob("node-*/checkpoints/*")) and not list(tmp_path.glob("node-*/metrics.jsonl"))
