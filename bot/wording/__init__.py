"""How a launch speaks: thread events hold a move and its facts; this room words them."""
