"""What the tests share that is not a fixture: the running service, test repositories, tiny checkpoints."""
