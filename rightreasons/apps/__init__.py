"""The applications on top of the library: the command line (:mod:`.cli`), the demo (:mod:`.demo`) and sweeps of
training runs (:mod:`.sweep`). Nothing below imports them."""
