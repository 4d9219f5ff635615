"""requirements.lock is the exact set the README and CI install: every range in pyproject.toml (runtime and the
`test` extra) has a pinned, hashed entry there that the range admits, so a range changed without `bash .ci/lock`
fails here rather than in a user's fresh clone."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def locked_versions(text: str) -> dict[str, str]:
    """{canonical name: version} of each `name==version` line of a pip lock (continuation lines skipped)."""
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", text, flags=re.MULTILINE)
    return {canonicalize_name(name): version for name, version in pins}


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]


def test_the_lock_parser_reads_pins_and_skips_hashes():
    text = "# a comment\nfoo-bar==1.2.3 \\\n    --hash=sha256:ab\n    # via x\nBaz_Qux==0.1 ; python_version >= '3'\n"
    assert locked_versions(text) == {"foo-bar": "1.2.3", "baz-qux": "0.1"}


@pytest.mark.parametrize("requirement", project_requirements(), ids=str)
def test_every_range_of_pyproject_is_pinned_in_the_lock_within_its_range(requirement):
    lock = (ROOT / "requirements.lock").read_text()
    pins = locked_versions(lock)
    name = canonicalize_name(requirement.name)
    assert name in pins, f"{requirement.name} is in pyproject.toml but not in requirements.lock: run `bash .ci/lock`"
    assert requirement.specifier.contains(pins[name], prereleases=True), (
        f"requirements.lock pins {name}=={pins[name]}, outside pyproject.toml's {requirement}: run `bash .ci/lock`"
    )


def test_every_pin_of_the_lock_has_a_hash():
    entries = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements.lock").read_text())
    pinned = [e for e in entries if re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*==", e)]
    assert len(pinned) == len(locked_versions((ROOT / "requirements.lock").read_text())) > 50
    assert [e.split()[0] for e in pinned if "--hash=sha256:" not in e] == []


def test_torch_is_pinned_to_the_constraint_ci_installs():
    pins = locked_versions((ROOT / "requirements.lock").read_text())
    constraints = locked_versions((ROOT / ".ci" / "constraints.txt").read_text())
    assert {name: pins[name] for name in constraints} == constraints
