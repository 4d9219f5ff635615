"""Hops: how many modules a photo passes through to become a class-specific map, and a model spec from the
sidebar to the loaded model (issue 37's "fewer hops"), counted from the running page, not by reading the code.

The real page runs under Streamlit's AppTest (app.py of the tree that `import vitviz` finds, in this process) with
a tiny random-weight checkpoint as the default model (tests/tiny_models.py of that tree). A profiler
(sys.setprofile, and threading.setprofile for the thread AppTest runs the page in) records the Python stack when
each walk's end is first entered:

- photo: the compute function of the explanation Method named "relevance" (vitviz.explain.registry), entered when
  the "Class-specific" tab is opened on an uploaded photo. The chain runs from the tab's draw to the method's module.
- default spec: vitviz.loading.checkpoint.load_checkpoint, the loader "default" resolves to, entered in the page's
  first run. The chain runs from the Photo page function (vitviz_dashboard.app.photo_page) to the loader.
- timm spec: timm.create_model, entered after the spec is typed into the sidebar's spec field; the network is
  away (HF_HUB_OFFLINE=1, sockets refused), so the load then fails, after its stack was taken.

Only frames of the project are kept (app.py, vitviz/, vitviz_dashboard/); consecutive frames of one module collapse
into one link of the module chain, and hops = links - 1 (module-to-module calls on the stack).

The spec's own walk (data, not calls): until its loader is entered, every project function that takes the spec as
an argument (a string equal to it or to its name after the prefix, or a dataclass holding one as a field), returns
it (its caller is handed it), or gets it back from a library (a Streamlit widget: it reads it). Each holding notes
where the spec came from: the nearest project caller, the function that returned it, or outside the project. From
the loader back, each holding's source's latest holding before it gives the spec's provenance, up to the widget
read (or a closure the profiler cannot see, in the same module). Its modules, consecutive repeats collapsed, with
round trips cut out (the sidebar asking loading/ what a typed spec means and getting it back) give the spec's
hops; with round trips counted, hops_with_round_trips. Side trips that led nowhere (a check answering yes or no,
a label for a message) are off the provenance but listed among the holders.

    .venv/bin/python bench/hops.py --out bench/results/hops.json

At another commit: `git worktree add /tmp/old COMMIT`, then from /tmp/old run
`PYTHONPATH=/tmp/old /path/to/checkout/.venv/bin/python /path/to/checkout/bench/hops.py --label before --out ...`
(the result names the vitviz it imported; a run from a tree that is not the one imported stops).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import CodeType, FrameType

import common  # bench/common.py

PACKAGES = ("vitviz", "vitviz_dashboard")
TIMM_SPEC = "timm:vit_tiny_patch16_224"
HOW = (
    "calls: the project frames on the stack when the walk's end is first entered (consecutive frames of a module "
    "collapsed; hops = modules - 1), from the tab's draw (photo) or the Photo page function (specs). spec: the "
    "holders the loaded spec came through, back from the loader to the widget read, round trips cut out (hops) and "
    "counted (hops_with_round_trips). See bench/hops.py's docstring."
)


@dataclasses.dataclass(frozen=True)
class Link:
    """One project frame: its module (dotted; "app" for app.py) and function."""

    module: str
    function: str


def project_module(filename: str, root: Path) -> str | None:
    """The dotted module of a file of the project under ``root`` (app.py, vitviz/, vitviz_dashboard/), else None."""
    try:
        parts = Path(filename).resolve().relative_to(root).parts
    except ValueError:
        return None
    if parts == ("app.py",):
        return "app"
    if len(parts) < 2 or parts[0] not in PACKAGES or not parts[-1].endswith(".py"):
        return None
    names = [*parts[:-1], parts[-1].removesuffix(".py")]
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def module_chain(links: list[Link]) -> list[str]:
    """The modules of ``links`` in order, consecutive repeats collapsed into one."""
    chain: list[str] = []
    for link in links:
        if not chain or chain[-1] != link.module:
            chain.append(link.module)
    return chain


def loop_erased(chain: list[str]) -> list[str]:
    """``chain`` with its round trips cut out: where a module comes back, the detour since its first visit goes
    (the sidebar asking loading/ what a typed spec means and getting it back is no step towards the model)."""
    path: list[str] = []
    for module in chain:
        path = path[: path.index(module)] if module in path else path
        path.append(module)
    return path


def from_function(links: list[Link], start: Link) -> list[Link]:
    """``links`` from the first that is ``start`` on; an error when none is (the walk's end was reached some other
    way, and its count would mean something else)."""
    if start not in links:
        raise ValueError(f"{start.module}.{start.function} is not on the stack: {links}")
    return links[links.index(start) :]


def holds(value: object, carried: tuple[str, ...]) -> bool:
    """Whether ``value`` is one of the ``carried`` strings, or a dataclass with one as a field."""
    if isinstance(value, str):
        return value in carried
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (getattr(value, field.name, None) for field in dataclasses.fields(value))
        return any(isinstance(field, str) and field in carried for field in fields)
    return False


@dataclasses.dataclass(frozen=True)
class Holder:
    """A project function holding the spec: how it got it, and from which function (None: from outside the
    project, a Streamlit widget say). A function that returns the spec had it from itself."""

    link: Link
    how: str
    source: Link | None


@dataclasses.dataclass
class Walk:
    """One walk: the code object that ends it, the strings that carry its spec (none for the photo), the stack taken
    when the end was first entered, and the spec's holders until then."""

    name: str
    end: CodeType
    carried: tuple[str, ...] = ()
    stack: list[Link] | None = None
    holders: list[Holder] = dataclasses.field(default_factory=list)


class Recorder:
    """The profile function: takes each walk's stack on its end's first entry, and logs the spec's holders."""

    def __init__(self, root: Path, walks: list[Walk]):
        self.root, self.walks = root, walks
        self.modules: dict[str, str | None] = {}
        self.ends = {walk.end: walk for walk in walks}

    def module(self, code: CodeType) -> str | None:
        name = code.co_filename
        if name not in self.modules:
            self.modules[name] = project_module(name, self.root)
        return self.modules[name]

    def link(self, frame: FrameType | None) -> Link | None:
        """The frame as a Link, None for a frame outside the project (or none)."""
        module = None if frame is None else self.module(frame.f_code)
        return None if module is None else Link(module, frame.f_code.co_qualname)

    def caller(self, frame: FrameType) -> Link | None:
        """The nearest project frame that ``frame`` was called from, through any library frames between (Streamlit's
        cache wrappers, say)."""
        frame = frame.f_back
        while frame is not None and self.module(frame.f_code) is None:
            frame = frame.f_back
        return self.link(frame)

    def links(self, frame: FrameType | None) -> list[Link]:
        """The project frames of the stack at ``frame``, outermost first."""
        links = []
        while frame is not None:
            link = self.link(frame)
            if link is not None:
                links.append(link)
            frame = frame.f_back
        return links[::-1]

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            walk = self.ends.get(frame.f_code)
            if walk is not None and walk.stack is None:
                module = self.module(frame.f_code) or frame.f_globals.get("__name__", "?")
                end = Link(module, frame.f_code.co_qualname)
                walk.stack = [*self.links(frame.f_back), end]
                walk.holders.append(Holder(end, "loads it", self.caller(frame)))
                return
        elif event != "return":
            return
        link = self.link(frame)
        if link is None:
            if event == "return":
                self.read(frame, arg)
            return
        for walk in self.walks:
            if walk.stack is not None or not walk.carried:
                continue
            if event == "call" and any(holds(v, walk.carried) for v in arguments(frame)):
                walk.holders.append(Holder(link, "takes it", self.caller(frame)))
            elif event == "return" and holds(arg, walk.carried):
                walk.holders.append(Holder(link, "returns it", link))
                caller = self.link(frame.f_back)
                if caller is not None:
                    walk.holders.append(Holder(caller, "is handed it", link))

    def read(self, frame: FrameType, value: object) -> None:
        """A function outside the project (a Streamlit widget, say) hands a spec to a project frame: it reads it."""
        caller = self.link(frame.f_back)
        if caller is None:
            return
        for walk in self.walks:
            if walk.stack is None and walk.carried and holds(value, walk.carried):
                source = frame.f_globals.get("__name__", "?")
                walk.holders.append(Holder(caller, f"reads it from {source}", None))

    def install(self) -> None:
        sys.setprofile(self)
        threading.setprofile(self)

    @staticmethod
    def remove() -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def arguments(frame: FrameType) -> list[object]:
    """The values of a just-called function's parameters."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
    local = frame.f_locals
    return [local.get(name) for name in code.co_varnames[:count]]


def png_bytes() -> bytes:
    from PIL import Image

    image = Image.new("RGB", (64, 48), (200, 30, 30))
    image.paste((20, 20, 220), (0, 0, 32, 24))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def refuse_network() -> None:
    """No Hub downloads: HF_HUB_OFFLINE (set before huggingface_hub is imported) and every connection refused."""

    def unreachable(*args, **kwargs):
        raise OSError(101, "Network is unreachable")

    socket.socket.connect = unreachable  # type: ignore[method-assign]


def stack_record(walk: Walk, start: Link) -> dict:
    """A walk's stack as links and module chain, from ``start`` on, and its hop count."""
    assert walk.stack is not None, f"{walk.name}: its end was never entered"
    links = from_function(walk.stack, start)
    chain = module_chain(links)
    return {
        "from": f"{start.module}.{start.function}",
        "frames": len(links),
        "modules": chain,
        "hops": len(chain) - 1,
        "stack": [f"{link.module}.{link.function}" for link in links],
        "whole_project_stack": [f"{link.module}.{link.function}" for link in walk.stack],
    }


def provenance(holders: list[Holder]) -> list[Holder]:
    """The holders the loaded spec came through, first to last: from the loader's holder (the last), each holder's
    source's latest holding before it, back to a holder that had it from outside the project (the widget). Side
    trips that led nowhere (a label for a message, a check that answered yes or no) are not on it."""
    if not holders:
        return []
    index, path = len(holders) - 1, [holders[-1]]
    while path[-1].source is not None:
        source = path[-1].source
        earlier = [i for i in range(index) if holders[i].link == source]
        if not earlier:  # the source had it in a variable (a closure's, say): it is where the walk starts
            path.append(Holder(source, "had it in a variable", None))
            break
        index = earlier[-1]
        path.append(holders[index])
    return path[::-1]


def spec_record(walk: Walk) -> dict:
    """The spec's walk to its loader (``provenance``): its modules with round trips cut out and their hops, then
    the same with round trips counted; every holder in order (from the run that loaded the model) and the distinct
    modules among them."""
    came = provenance(walk.holders)
    chain = module_chain([holder.link for holder in came])
    path = loop_erased(chain)
    return {
        "carried": list(walk.carried),
        "modules": path,
        "hops": len(path) - 1,
        "with_round_trips": chain,
        "hops_with_round_trips": len(chain) - 1,
        "provenance": [describe(holder) for holder in came],
        "holders": [describe(holder) for holder in walk.holders],
        "distinct_modules_holding_it": len({holder.link.module for holder in walk.holders}),
    }


def describe(holder: Holder) -> str:
    return f"{holder.link.module}.{holder.link.function} ({holder.how})"


def commit_of(root: Path) -> str | None:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    return result.stdout.strip() or None


def tab_key(root: Path) -> str:
    """The session key the Photo page's tabs are bound to: state.PHOTO_TAB where the tree at ``root`` has one, else
    "tab". (Asked of the file first: an editable install would import a state.py the tree lacks from the checkout.)"""
    if not (root / "vitviz_dashboard" / "state.py").is_file():
        return "tab"
    from vitviz_dashboard import state

    return str(getattr(state, "PHOTO_TAB", "tab"))


def strays(root: Path) -> list[str]:
    """The project's modules imported from anywhere but ``root`` (an editable install's fallback): none may be."""
    files = {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())}
    return [
        f"{name}: {file}"
        for name, file in files.items()
        if name.split(".")[0] in PACKAGES and file and not Path(file).resolve().is_relative_to(root)
    ]


def run_page(root: Path, walks: dict[str, Walk]) -> list[str]:
    """The page, driven: first run (the default model loads), a photo uploaded, the Class-specific tab opened,
    then the timm spec typed into the sidebar's spec field. Returns the errors the page showed."""
    from streamlit.testing.v1 import AppTest

    from vitviz_dashboard.sidebar.model_picker import HUB_SPEC

    recorder = Recorder(root, list(walks.values()))
    recorder.install()
    try:
        at = AppTest.from_file(str(root / "app.py"), default_timeout=600)
        at.run()
        at.file_uploader[0].set_value(("photo.png", png_bytes(), "image/png")).run()
        at.session_state[tab_key(root)] = "Class-specific"
        at.run()
        assert not at.exception, at.exception
        # the timm spec's walk starts now: what the first runs held does not count
        walks["timm spec"].holders.clear()
        fields = {field.id for field in at.sidebar.text_input}
        next(box for box in at.sidebar.selectbox if box.label == "Model").set_value(HUB_SPEC).run()
        # the field that choosing HUB_SPEC opened
        next(field for field in at.sidebar.text_input if field.id not in fields).set_value(TIMM_SPEC).run()
    finally:
        recorder.remove()
    return [error.value for error in at.error]


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument(
        "--label", default="after", help="this run's key in --out; the file's other keys (other commits) are kept"
    )
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["VITVIZ_SAMPLES"] = ""  # no sample photos from the machine: the page shows the uploaded one
    refuse_network()
    import vitviz

    root = Path(vitviz.__file__).resolve().parent.parent
    here = Path.cwd().resolve()
    if (here / "vitviz").is_dir() and here != root:  # measuring a worktree needs PYTHONPATH set to it
        sys.exit(f"vitviz is imported from {root}, not from the tree here ({here}): set PYTHONPATH={here}")
    folder = Path(tempfile.mkdtemp(prefix="vitviz-hops-"))
    try:
        results = measure(root, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"vitviz: {results['vitviz']} (commit {results['commit']})")
    print(table(results))
    if args.out:
        common.save(merged(args.out, args.label, results), args.out)
        print(f"written to {args.out} under {args.label!r}")


def measure(root: Path, folder: Path) -> dict:
    """The three walks on the page of the tree at ``root``, its default model a tiny checkpoint saved in ``folder``."""
    import timm

    import vitviz
    import vitviz.loading.checkpoint
    import vitviz.loading.specs
    from vitviz.explain.registry import get_method
    from vitviz_dashboard.app import TABS, photo_page

    sys.path.insert(0, str(root / "tests"))
    from tiny_models import tiny_checkpoint

    vitviz.loading.specs.DEFAULT_CHECKPOINT = tiny_checkpoint(folder / "default.pt")
    relevance = get_method("relevance").compute
    walks = {
        "photo": Walk("photo", relevance.__code__),
        "default spec": Walk("default spec", vitviz.loading.checkpoint.load_checkpoint.__code__, ("default",)),
        "timm spec": Walk("timm spec", timm.create_model.__code__, (TIMM_SPEC, TIMM_SPEC.split(":", 1)[1])),
    }
    errors = run_page(root, walks)
    if strays(root):
        raise RuntimeError(f"modules from outside {root}: {strays(root)}")
    draw = Link(TABS["Class-specific"].__module__, TABS["Class-specific"].__qualname__)
    page = Link(photo_page.__module__, photo_page.__qualname__)
    return {
        "vitviz": vitviz.__file__,
        "commit": commit_of(root),
        "relevance_compute": f"{relevance.__module__}.{relevance.__qualname__}",
        "page_errors": errors,
        "photo": {"calls": stack_record(walks["photo"], draw)},
        "default spec": {
            "calls": stack_record(walks["default spec"], page),
            "spec": spec_record(walks["default spec"]),
        },
        "timm spec": {"calls": stack_record(walks["timm spec"], page), "spec": spec_record(walks["timm spec"])},
    }


def table(results: dict) -> str:
    """One line per chain: the walk, calls or spec, its hops, what else was counted, and its modules."""
    lines = [f"{'walk':<13} {'chain':<5} {'hops':>4}  {'counted':<28} modules"]
    for name in ("photo", "default spec", "timm spec"):
        for what, record in results[name].items():
            counted = (
                f"{record['frames']} frames"
                if what == "calls"
                else f"{record['hops_with_round_trips']} with round trips"
            )
            lines.append(f"{name:<13} {what:<5} {record['hops']:>4}  {counted:<28} {' -> '.join(record['modules'])}")
    return "\n".join(lines)


def merged(out: Path, label: str, results: dict) -> dict:
    """The results already in ``out`` (one key per commit measured), with ``label`` set to ``results``."""
    earlier = json.loads(out.read_text()) if out.is_file() else {}
    return earlier | {"how": HOW, label: results}


if __name__ == "__main__":
    main()
