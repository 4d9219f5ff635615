"""``ModelSource``: the record each source module declares for its ``"<prefix>:<name>"`` specs.

``vitviz.loading.specs.SOURCES`` lists them; ``load_model``, the error message for an unknown spec and the
dashboard's checks of a typed spec all read that list. Adding a source is one module with one such record, and its
line in ``SOURCES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vitviz.model import ViT


@dataclass(frozen=True)
class ModelSource:
    """One library that models come from, as the spec prefix ``f"{prefix}:"``.

    ``load`` takes the name after the prefix (stripped) and returns the model, or raises ModelLoadError.
    ``usage`` says how a spec of this source is written, quoted, for messages (``"'timm:<name>'"``).
    ``names_no_path`` says of a name typed into a web page whether it can open nothing but the source's own
    registry or hub (a timm name with ``local-dir:`` could open a local folder); None: the page does not take this
    source typed in (torchvision's few architectures are picked from a list).
    """

    prefix: str
    load: Callable[[str], ViT]
    usage: str
    names_no_path: Callable[[str], bool] | None = None

    def spec(self, name: str) -> str:
        """The spec of ``name`` from this source: ``spec("vit_b_16") == "torchvision:vit_b_16"``."""
        return f"{self.prefix}:{name}"

    def owns(self, spec: str) -> bool:
        return spec.startswith(f"{self.prefix}:")

    def name(self, spec: str) -> str:
        """What follows the prefix, stripped (``owns(spec)`` must hold)."""
        return spec.removeprefix(f"{self.prefix}:").strip()
