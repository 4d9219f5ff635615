"""The errors of vitviz.sae: each a ValueError whose message names the problem and the fix."""

from __future__ import annotations


class SAEError(ValueError):
    """A sparse autoencoder cannot be built, trained, loaded or applied as asked."""


class SAEFormatError(SAEError):
    """A file or folder is not a sparse autoencoder in a format vitviz reads."""


class SAEMemoryError(SAEError):
    """Training would need more memory than the machine has; raised before anything is allocated."""
