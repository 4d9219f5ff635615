"""A download from a server that accepts the connection and never answers (a stalled network, a captive
portal): how long torch.hub.download_url_to_file and vitviz's download take to give up.

This is the measured reason vitviz keeps its own small downloader for torchvision's weights (a bounded
timeout on every connect and read) instead of torch.hub's, which has no timeout.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from pathlib import Path

import common  # bench/common.py
import torch

from vitviz.loading import ModelLoadError
from vitviz.loading.download import DOWNLOAD_TIMEOUT_S, download


def silent_server() -> tuple[socket.socket, str]:
    """A loopback server that accepts connections and never sends a byte; the URL of a weights file on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []  # keep the connections open
    threading.Thread(target=lambda: [accepted.append(server.accept()) for _ in range(8)], daemon=True).start()
    return server, f"http://127.0.0.1:{server.getsockname()[1]}/vit_b_16-c867db91.pth"


def seconds_to_give_up(fetch, wait: float) -> float | None:
    """Seconds until ``fetch()`` returns or raises, or None when it is still waiting after ``wait`` seconds."""
    worker = threading.Thread(target=lambda: _quietly(fetch), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(wait)
    return None if worker.is_alive() else round(time.monotonic() - start, 1)


def _quietly(fetch) -> None:
    try:
        fetch()
    except (ModelLoadError, OSError):
        pass


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for each downloader")
    args = parser.parse_args(argv)
    server, url = silent_server()
    with tempfile.TemporaryDirectory() as folder, server:
        hub_s = seconds_to_give_up(
            lambda: torch.hub.download_url_to_file(url, f"{folder}/a.pth", progress=False), args.wait
        )
        vitviz_s = seconds_to_give_up(lambda: download(url, Path(folder) / "b.pth"), args.wait)
    results = {
        "torch": torch.__version__,
        "wait_s": args.wait,
        "vitviz_timeout_s": DOWNLOAD_TIMEOUT_S,
        "torch_hub_gave_up_after_s": hub_s,
        "vitviz_gave_up_after_s": vitviz_s,
    }
    for who, seconds in [("torch.hub.download_url_to_file", hub_s), ("vitviz.loading.download.download", vitviz_s)]:
        print(
            f"{who:32s} "
            + (f"gave up after {seconds} s" if seconds is not None else f"still waiting after {args.wait:.0f} s")
        )
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
