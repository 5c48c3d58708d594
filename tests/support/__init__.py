"""What the tests share that is not a fixture: the running service, test repositories, tiny checkpoints, and a fake
of the Triton runner with the engine and the routes run in-process over it, for the fast layer."""
