"""Errors the tokenizers raise for client input; the service maps them to HTTP statuses."""


class SequenceError(ValueError):
    """One input sequence cannot be tokenized; `index` is its position in the request."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


class SequenceTooLong(SequenceError):
    """One input is over the model's length limit: where a request may ask for truncation, it could have."""
