"""VLMError, the one error of vitviz.vlm: a model folder, a processor, a question or an image that cannot be used."""

from __future__ import annotations

from vitviz.messages import clip_text

MAX_MESSAGE = 1000  # characters; whatever the message quotes (a path, a library's error) is cut before


class VLMError(ValueError):
    """A vision-language model could not be loaded or asked; the message is one line that names the problem."""

    def __init__(self, message: str):
        super().__init__(clip_text(message, MAX_MESSAGE))
