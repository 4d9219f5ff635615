"""Many people at once: browser sessions against one real `streamlit run app.py` on loopback.

Each session is a headless Chromium tab (its own browser context, so its own Streamlit
session and websocket). It uploads its own images one after another and, after each, switches
the Image picker back to its previous image and forward again, until the time is up. We report uploads,
control changes, problems (exceptions or error messages on any page), how often the server loaded the model and ran the
ViT, Streamlit's own cache metrics at the end, and the server's peak resident memory.

    python bench/load_sessions.py --sessions 8 --seconds 120 --out bench/results/load_sessions.json

The harness lives in tests/browser_harness.py; tests/test_concurrent_sessions.py runs it on a
tiny model with assertions. This script runs it on the shipped default checkpoint.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

import common  # bench/common.py

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from browser_harness import run_sessions, streamlit_server


def main(argv: list[str] | None = None) -> dict:
    parser = common.parser(__doc__)
    parser.add_argument("--sessions", type=int, default=8, help="concurrent browser sessions")
    parser.add_argument("--seconds", type=float, default=120, help="how long every session keeps uploading")
    parser.add_argument(
        "--images", type=int, default=6, help="distinct images per session, each uploaded at least once"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        with streamlit_server(Path(folder), {"VITVIZ_SAMPLES": ""}) as server:
            report = run_sessions(server.url, Path(folder), args.sessions, args.seconds, args.images)
            results = {
                "sessions": report.sessions,
                "seconds": round(report.seconds, 1),
                "uploads": report.uploads,
                "control_changes": report.control_changes,
                "problems": report.problems,
                "median_upload_round_trip_s": round(statistics.median(report.round_trip_s), 2)
                if report.round_trip_s
                else None,
                **server.counts(),
                "store": server.store(),
                "server_peak_rss_mb": round(server.peak_memory_mb(), 1),
            }
    print(json.dumps(results, indent=1))
    common.save(results, args.out)
    return results


if __name__ == "__main__":
    main()
