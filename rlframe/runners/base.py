"""Runner interface."""


class BaseRunner:
    """Drives sampler, agent and algorithm through training: ``train()``."""

    def train(self) -> None:
        raise NotImplementedError
