"""The command line: render a factory or a saved recording, demo, doctor, and clean errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from torchgraphrec.cli import main
from torchgraphrec.graph import from_json

FACTORY = textwrap.dedent("""
    import torch

    def model():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())

    def model_and_inputs():
        return torch.nn.Linear(5, 2), torch.randn(1, 5)

    def embedder():
        return torch.nn.Embedding(10, 3)

    class Scaled(torch.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    def keyword_inputs():
        return Scaled(), {"x": torch.ones(2), "scale": 3.0}

    def args_and_kwargs():
        return Scaled(), (torch.ones(2),), {"scale": 3.0}

    def number():
        return 42

    def needs_a_backend():  # as transformers' requires_backends words it: blank line first
        raise ImportError("\\n  needs the protobuf library, which was not found\\n(install it)")
""")


@pytest.fixture
def factory_file(tmp_path: Path) -> Path:
    path = tmp_path / "zoo_factories.py"
    path.write_text(FACTORY)
    return path


def test_render_a_factory_with_input_shapes(factory_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "conv.svg"
    assert main(["render", f"{factory_file}:model", "--input-shape", "1,3,8,8", "-o",
                 str(out), "--depth", "1", "--rankdir", "LR"]) == 0
    assert out.read_text().lstrip().startswith("<?xml") and "Conv2d" in out.read_text()
    assert capsys.readouterr().out.strip() == str(out)


def test_render_options_reach_the_drawing(factory_file: Path, tmp_path: Path) -> None:
    def dot(*options: str) -> str:
        out = tmp_path / "conv.dot"
        assert main(["render", f"{factory_file}:model", "--input-shape", "1,3,8,8", "-o",
                     str(out), *options]) == 0
        return out.read_text()

    plain = dot()
    assert 'class="tgr-param"' not in plain and 'class="tgr-box"' in plain
    assert "3→4, 3×3" in plain
    detailed = dot("--depth", "all", "--expand-leaves", "--params", "--tensors", "--no-settings")
    assert 'class="tgr-param"' in detailed and 'class="tgr-op"' in detailed
    assert "3→4, 3×3" not in detailed
    with pytest.raises(SystemExit):
        main(["render", f"{factory_file}:model", "-o", str(tmp_path / "x.svg"), "--depth", "deep"])


def test_render_a_factory_that_returns_inputs(factory_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "linear.json"
    assert main(["render", f"{factory_file}:model_and_inputs", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["graph"]["model"] == "Linear"


def test_integer_inputs_for_embeddings(factory_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "emb.dot"
    assert main(["render", f"{factory_file}:embedder", "--input-shape", "2,4", "--dtype",
                 "int64", "-o", str(out)]) == 0
    assert "int64" in out.read_text()


def test_render_a_saved_recording_without_importing_torch(tmp_path: Path) -> None:
    assert main(["demo", "-o", str(tmp_path)]) == 0
    script = (f"import sys; from torchgraphrec.cli import main; "
              f"code = main(['render', {str(tmp_path / 'demo.json')!r}, '-o', "
              f"{str(tmp_path / 'again.svg')!r}, '--depth', '1']); "
              f"assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    svg = ElementTree.parse(tmp_path / "again.svg").getroot()
    classes = [g.get("class") for g in svg.iter("{http://www.w3.org/2000/svg}g")]
    assert classes.count("node tgr-box") == 3  # stem, blocks and head at depth 1


def test_demo_writes_the_files_the_docs_name(tmp_path: Path, capsys) -> None:
    assert main(["demo", "-o", str(tmp_path / "out")]) == 0
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"demo.svg", "demo.png", "demo.dot", "demo.json", "demo.graphml",
            "demo-depth1.svg"} <= names
    printed = capsys.readouterr().out
    assert ("demo.pdf" in names) == ("skipped demo.pdf" not in printed)
    page = (Path(__file__).parent.parent / "docs" / "cli.rst").read_text(encoding="utf-8")
    entry = page.split("``demo -o DIR``")[1].split("``doctor``")[0]
    assert set(re.findall(r"``(demo[\w-]*\.\w+)``", entry)) == names | {"demo.pdf"}


def test_a_recording_saved_with_an_upper_case_suffix_reads_back(factory_file: Path,
                                                                 tmp_path: Path,
                                                                 capsys) -> None:
    saved = tmp_path / "linear.JSON"  # render writes it: format_of ignores the case
    assert main(["render", f"{factory_file}:model_and_inputs", "-o", str(saved)]) == 0
    assert main(["summary", str(saved)]) == 0
    assert main(["render", str(saved), "-o", str(tmp_path / "again.dot")]) == 0
    assert main(["diff", str(saved), str(saved)]) == 0
    assert "Linear" in (tmp_path / "again.dot").read_text()


@pytest.mark.parametrize("argv, buffered", [(["summary", "SAVED"], True),
                                            (["summary", "SAVED"], False),
                                            (["--help"], True)])
def test_a_reader_that_goes_away_ends_the_command_quietly(argv: list, buffered: bool,
                                                          tmp_path: Path) -> None:
    # buffered, the write fails when stdout is flushed; unbuffered, in print itself
    # (unbuffered, argparse's --help swallows the failure itself)
    import torch

    from torchgraphrec.recorder import record

    saved = record(torch.nn.Linear(2, 2), torch.ones(1, 2)).render(tmp_path / "rec.json")
    reading, writing = os.pipe()
    os.close(reading)  # as `| head` does once it has its lines: every write fails
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        done = subprocess.run([sys.executable, "-m", "torchgraphrec",
                               *[str(saved) if a == "SAVED" else a for a in argv]],
                              stdout=writing, stderr=subprocess.PIPE, text=True,
                              env=env if buffered else {**env, "PYTHONUNBUFFERED": "1"})
    finally:
        os.close(writing)
    assert (done.returncode, done.stderr) == (141, "")


def test_doctor_runs(capsys) -> None:
    assert main(["doctor"]) == 0
    assert "engine graphviz-pure" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["render", "no_such_module:thing", "-o", "x.svg"], "No module named 'no_such_module'"),
    (["render", "nocolon", "-o", "x.svg"], "bad model target: 'nocolon'"),
    (["render", "missing.json", "-o", "x.svg"], "No such file or directory"),
    (["render", "FILE:model", "-o", "x.svg"], "returned a model without inputs: give --input-shape"),
    (["render", "FILE:model", "--input-shape", "1,x", "-o", "x.svg"], "bad input shape: '1,x'"),
    (["render", "FILE:model", "--input-shape", "1,3,8,8", "-o", "x.bmp"], "unknown format: '.bmp'"),
    (["render", "FILE:number", "-o", "x.svg"],
     "must return a torch.nn.Module, (model, inputs) or (model, args, kwargs), got int"),
    (["render", "FILE:model", "--input-shape", "1,3,8,8", "-o", "x.me-data.json"],
     "name it with --color-by"),
    (["render", "FILE:model", "--input-shape", "1,3,8,8", "-o", "no_folder/x.svg"],
     "No such file or directory: 'no_folder'"),  # the folder, not a temporary file in it
    (["render", "FILE:needs_a_backend", "-o", "x.svg"],
     "ImportError: needs the protobuf library, which was not found"),
    # a saved recording is drawn as it was: what would record it otherwise is refused
    (["render", "SAVED", "--backward", "-o", "x.svg"],
     "was recorded without a backward: record it with torchgraphrec.record(model, inputs, "
     "backward=True), then save it as .json again, or draw the model itself: "
     "torchgraphrec render pkg.module:factory"),
    (["render", "SAVED", "--input-shape", "1,5", "-o", "x.svg"],
     "is a saved recording, drawn as it was recorded: --input-shape and --dtype are for a "
     "model factory"),
])
def test_errors_are_one_line_with_status_1(argv, match, factory_file, tmp_path, capsys,
                                           monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [str(factory_file) + a[4:] if a.startswith("FILE") else a for a in argv]
    if "SAVED" in argv:
        saved = tmp_path / "saved.json"
        assert main(["render", f"{factory_file}:model_and_inputs", "-o", str(saved)]) == 0
        argv = [str(saved) if a == "SAVED" else a for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchgraphrec: error: ") and "\n" not in err
    assert match in err
    assert not list(tmp_path.glob("x.*"))


@pytest.mark.parametrize("option, match", [
    (["--rankdir", "sideways"], "invalid choice: 'sideways'"),
    (["--depth", "-3"], "depth must be a number >= 0, 'auto' or 'all', got '-3'"),
])
def test_usage_errors_exit_with_status_2(option: list, match: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["render", "x.json", "-o", "x.svg", *option])
    assert exited.value.code == 2
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("name", ["keyword_inputs", "args_and_kwargs"])
def test_a_factory_may_return_keyword_inputs(name: str, factory_file: Path,
                                             tmp_path: Path) -> None:
    out = tmp_path / "scaled.json"
    assert main(["render", f"{factory_file}:{name}", "-o", str(out)]) == 0
    graph = from_json(out.read_text())
    ops = [attrs for _, attrs in graph.nodes(data=True) if attrs["kind"] == "op"]
    assert [op["name"] for op in ops] == ["mul"] and "3.0" in ops[0]["args"]


@pytest.mark.parametrize("suffix, key", [(".me.json", "graphs"), (".trace.json", "traceEvents"),
                                         (".me-data.json", "results")])
def test_render_writes_the_exports_for_other_tools(suffix: str, key: str, factory_file: Path,
                                                   tmp_path: Path) -> None:
    # the drawing options the command line always has are not theirs: they take none
    out = tmp_path / f"linear{suffix}"
    assert main(["render", f"{factory_file}:model_and_inputs", "-o", str(out), "--depth", "2",
                 "--color-by", "flops"]) == 0
    assert key in out.read_text()


def test_a_file_target_imports_the_modules_beside_it(tmp_path: Path, capsys) -> None:
    # as `python folder/factory.py` would run it: its folder first on sys.path, from any
    # working folder, also for an import inside the factory; sys.path is left as it was
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "tgr_sibling_nets.py").write_text(
        "import torch\ndef net():\n    return torch.nn.Sequential(torch.nn.Linear(4, 3))\n")
    (folder / "factory.py").write_text(textwrap.dedent("""
        import torch
        from tgr_sibling_nets import net

        def make():
            return net(), torch.randn(2, 4)

        def lazy():
            import tgr_sibling_nets
            return tgr_sibling_nets.net(), torch.randn(2, 4)
    """))
    before = list(sys.path)
    try:
        for name in ("make", "lazy"):
            out = tmp_path / f"{name}.json"
            assert main(["render", f"{folder / 'factory.py'}:{name}", "-o", str(out)]) == 0, \
                capsys.readouterr().err
            assert from_json(out.read_text()).graph["model"] == "Sequential"
            assert sys.path == before
    finally:
        sys.modules.pop("tgr_sibling_nets", None)


TENSORS = textwrap.dedent("""
    import torch

    class Open(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 2)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    def open_code():
        return Open(), torch.randn(4, 8)

    def sequential():
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                   torch.nn.Linear(16, 2)), torch.randn(4, 8)
""")


@pytest.mark.parametrize("name", ["open_code", "sequential"])
def test_tensors_draws_what_open_code_hands_to_a_call(name: str, tmp_path: Path) -> None:
    # as documented: a box's outputs are part of the box; --tensors adds the tensors the
    # code drawn open computed (a module's own forward), --expand-leaves opens every module
    factory = tmp_path / "tensors_factories.py"
    factory.write_text(TENSORS)
    assert main(["render", f"{factory}:{name}", "-o", str(tmp_path / "m.json")]) == 0
    graph = from_json((tmp_path / "m.json").read_text())
    # the calls drawn open: those holding calls (the others are boxes)
    opened = {a["parent"] for _, a in graph.nodes(data=True) if a["kind"] == "layer"} - {None}
    tensors = {n: a for n, a in graph.nodes(data=True) if a["kind"] == "tensor"}
    ends = {n for n, a in tensors.items() if a["role"] in ("input", "output")}
    open_made = {n for n, a in tensors.items() if a["parent"] in opened} - ends

    def drawn(*options: str) -> set[str]:
        out = tmp_path / "m.dot"
        assert main(["render", str(tmp_path / "m.json"), "-o", str(out), *options]) == 0
        return set(re.findall(r'id="n-(tensor:[^"]+)"', out.read_text()))

    assert drawn() == ends
    assert drawn("--tensors") == ends | open_made
    assert drawn("--tensors", "--expand-leaves") == set(tensors)
    assert bool(open_made) == (name == "open_code")


def test_me_data_takes_color_by_params_as_a_drawing_does(factory_file: Path,
                                                         tmp_path: Path) -> None:
    saved = tmp_path / "conv.json"
    assert main(["render", f"{factory_file}:model", "--input-shape", "1,3,8,8", "-o",
                 str(saved)]) == 0
    out = tmp_path / "conv.me-data.json"
    assert main(["render", str(saved), "-o", str(out), "--color-by", "params"]) == 0
    [overlay] = json.loads(out.read_text()).values()
    root = [a for _, a in from_json(saved.read_text()).nodes(data=True)
            if a["kind"] == "layer" and a["parent"] is None][0]
    assert overlay["name"] == "params"
    assert sum(item["value"] for item in overlay["results"].values()) == root["num_params"] > 0


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "torchgraphrec", "--help"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "render" in done.stdout and "doctor" in done.stdout


def test_the_commands_shown_in_the_docs_run(tmp_path: Path, monkeypatch, capsys) -> None:
    import shlex

    page = (Path(__file__).parent.parent / "docs" / "cli.rst").read_text(encoding="utf-8")
    commands = [line.strip()[2:] for line in page.splitlines()
                if line.strip().startswith("$ torchgraphrec ")]
    assert len(commands) == 8
    monkeypatch.chdir(tmp_path)
    for command in commands:
        assert main(shlex.split(command)[1:]) == 0, command
    assert {"model.svg", "demo.html", "net.dot", "costs.svg", "diff.svg"} <= {
        p.name for p in tmp_path.iterdir()}


DIFF_FACTORIES = textwrap.dedent("""
    import torch

    def narrow():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())

    def wide():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU())
""")


@pytest.fixture
def diff_file(tmp_path: Path) -> Path:
    path = tmp_path / "diff_factories.py"
    path.write_text(DIFF_FACTORIES)
    return path


def test_diff_exits_0_when_the_same(diff_file: Path, capsys) -> None:
    assert main(["diff", f"{diff_file}:narrow", f"{diff_file}:narrow",
                 "--input-shape", "2,4"]) == 0
    assert capsys.readouterr().out.startswith("same: 3 calls, ")


def test_diff_exits_1_when_they_differ_and_writes_the_union(diff_file: Path, tmp_path: Path,
                                                           capsys) -> None:
    out = tmp_path / "diff.json"
    assert main(["diff", f"{diff_file}:narrow", f"{diff_file}:wide", "--input-shape", "2,4",
                 "-o", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "changed 0 Linear: out_features=8 -> 16" in printed
    from torchgraphrec.graph import from_json

    union = from_json(out.read_text())
    assert union.nodes["layer:0#0"]["diff"] == "changed"
    assert union.nodes["layer:1#0"]["diff_changes"]["output_shapes"] == (((2, 8),), ((2, 16),))


@pytest.mark.parametrize("argv, match", [
    (["diff", "missing.json", "missing.json"], "No such file or directory"),
    (["diff", "FILE:narrow", "FILE:wide", "--input-shape", "2,4", "-o", "x.graphml"],
     r"unknown format for a diff: '.graphml' \(must be one of \['.dot', '.gv', '.html', "),
    (["diff", "FILE:narrow", "FILE:wide", "--input-shape", "2,4", "-o", "x.bmp"],
     r"unknown format for a diff: '.bmp' \(must be one of \['.dot', '.gv', '.html', "),
    (["diff", "FILE:narrow", "FILE:wide", "--input-shape", "2,4", "-o", "x.svg", "--theme",
      "dark"], None),
    (["diff", "FILE:narrow", "FILE:wide"], "returned a model without inputs"),
])
def test_diff_exits_2_on_errors(argv, match, diff_file, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [str(diff_file) + a[4:] if a.startswith("FILE") else a for a in argv]
    if match is None:  # argparse's own usage errors
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert "invalid choice: 'dark'" in capsys.readouterr().err
        return
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchgraphrec: error: ") and "\n" not in err
    assert re.search(match, err)
    assert not list(tmp_path.glob("x.*"))


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_diff_refuses_a_bad_max_lines_before_recording_or_writing(
        value: str, diff_file, tmp_path, capsys, monkeypatch) -> None:
    # it recorded both sides and wrote the union, then failed
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["diff", f"{diff_file}:narrow", f"{diff_file}:wide", "--input-shape", "2,4",
              "-o", "union.json", "--max-lines", value])
    assert exited.value.code == 2
    assert f"argument --max-lines: must be a whole number >= 1, got '{value}'" in \
        capsys.readouterr().err
    assert not (tmp_path / "union.json").exists()


def test_diff_usage_errors_exit_with_status_2(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["diff", "only-one.json"])
    assert exited.value.code == 2
    assert "the following arguments are required: B" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # the verb's usage, not the top level's
        main(["diff", "a.json", "b.json", "--bogus"])
    assert exited.value.code == 2
    assert "torchgraphrec diff: error: unrecognized arguments: --bogus" in \
        capsys.readouterr().err


def test_diff_of_saved_recordings_never_imports_torch(tmp_path: Path) -> None:
    assert main(["demo", "-o", str(tmp_path)]) == 0
    saved = str(tmp_path / "demo.json")
    script = (f"import sys; from torchgraphrec.cli import main; "
              f"code = main(['diff', {saved!r}, {saved!r}]); "
              f"assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("same: ")


#: How each drawing format of a diff begins.
MAGIC = {".svg": b"<?xml", ".png": b"\x89PNG", ".pdf": b"%PDF", ".dot": b"digraph",
         ".gv": b"digraph", ".html": b"<!DOCTYPE html>"}


@pytest.mark.parametrize("suffix", sorted(MAGIC))
def test_diff_draws_every_format(suffix: str, diff_file: Path, tmp_path: Path, capsys) -> None:
    if suffix == ".pdf":
        from torchgraphrec.render.engine import find_engines

        if not any("pdf" in engine.formats for engine in find_engines()):
            pytest.skip("neither system dot nor the [pdf] extra is installed")
    out = tmp_path / f"diff{suffix}"
    assert main(["diff", f"{diff_file}:narrow", f"{diff_file}:wide", "--input-shape", "2,4",
                 "-o", str(out), "--depth", "all"]) == 1
    assert out.read_bytes().lstrip()[:len(MAGIC[suffix])] == MAGIC[suffix]
    assert "changed 0 Linear: out_features=8 -> 16" in capsys.readouterr().out
    if suffix in (".dot", ".svg", ".html"):  # the marks are in the drawing's own text
        text = out.read_text(encoding="utf-8")
        assert "out_features=8 → 16" in text and "changed: old → new" in text


def test_diff_draws_the_same_models_greyed(diff_file: Path, tmp_path: Path) -> None:
    from torchgraphrec.render.theme import DEFAULT

    out = tmp_path / "same.dot"
    assert main(["diff", f"{diff_file}:narrow", f"{diff_file}:narrow", "--input-shape", "2,4",
                 "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert DEFAULT.diff_node["same"]["fillcolor"] in text and "→ 16" not in text
    for status in ("added", "removed", "changed"):
        assert DEFAULT.diff_node[status]["fillcolor"] not in text


def test_render_color_by_flops_records_the_flops(factory_file: Path, tmp_path: Path) -> None:
    from torchgraphrec.render.theme import SCALE

    out = tmp_path / "conv.svg"
    assert main(["render", f"{factory_file}:model", "--input-shape", "1,3,8,8", "-o", str(out),
                 "--color-by", "flops", "--show-costs"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "forward FLOPs" in text and "costs: forward FLOPs" in text
    # Conv2d(3, 4, 3) on 8×8 as PyTorch counts it: 2 × (4×6×6 outputs) × (3×3×3 inputs each)
    assert f"{2 * 4 * 6 * 6 * 3 * 3 * 3 / 1000:.1f} kFLOPs" in text
    assert f'fill="{SCALE[-1]}"' in text


@pytest.mark.needs("saved_bytes")
def test_render_color_by_saved_bytes_records_them(factory_file: Path, tmp_path: Path) -> None:
    from torchgraphrec.render.theme import SCALE

    out = tmp_path / "conv.svg"
    assert main(["render", f"{factory_file}:model", "--input-shape", "1,3,8,8", "-o", str(out),
                 "--color-by", "saved_bytes"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "activations saved for backward" in text and f'fill="{SCALE[-1]}"' in text


@pytest.mark.parametrize("color_by, lacking", [("flops", "FLOPs"), ("backward_flops", "FLOPs")])
def test_render_colored_by_costs_a_saved_recording_lacks_is_refused(
        color_by: str, lacking: str, tmp_path: Path, capsys) -> None:
    # it drew nothing coloured with exit 0, where summary --flops on that file is an error
    assert main(["demo", "-o", str(tmp_path)]) == 0
    out = tmp_path / "plain.dot"
    assert main(["render", str(tmp_path / "demo.json"), "-o", str(out), "--color-by",
                 color_by]) == 1
    assert f"demo.json was recorded without {lacking}" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("argv", [["--show-costs"], ["--color-by", "flops"]])
@pytest.mark.parametrize("suffix", [".svg", ".trace.json"])
def test_render_draws_what_a_saved_recording_holds_where_its_colouring_asks_nothing_else(
        argv: list, suffix: str, tmp_path: Path) -> None:
    # --show-costs shows the costs there are; an export takes no drawing options at all
    assert main(["demo", "-o", str(tmp_path)]) == 0
    out = tmp_path / f"costs{suffix}"
    code = main(["render", str(tmp_path / "demo.json"), "-o", str(out), *argv])
    refused = argv == ["--color-by", "flops"] and suffix == ".svg"
    assert code == (1 if refused else 0) and out.exists() != refused


def test_render_colored_by_backward_flops_records_the_backward(factory_file: Path,
                                                                tmp_path: Path) -> None:
    # the factory was recorded counting FLOPs but without a backward: nothing was coloured
    out = tmp_path / "backward.json"
    assert main(["render", f"{factory_file}:model", "--input-shape", "1,3,8,8", "-o",
                 str(out), "--color-by", "backward_flops"]) == 0
    graph = from_json(out.read_text(encoding="utf-8"))
    assert any(attrs.get("backward_flops") for _, attrs in graph.nodes(data=True))


@pytest.mark.parametrize("argv, match", [
    (["--dtype", "int64"], r"saved recording, drawn as it was recorded: --input-shape and "
                           r"--dtype are for a model factory"),
    (["--dtype", "not_a_dtype"], r"saved recording, drawn as it was recorded"),
])
def test_dtype_on_a_saved_recording_is_refused(argv: list, match: str, tmp_path: Path,
                                               capsys) -> None:
    assert main(["demo", "-o", str(tmp_path)]) == 0
    assert main(["render", str(tmp_path / "demo.json"), "-o", str(tmp_path / "x.svg"),
                 *argv]) == 1
    assert re.search(match, capsys.readouterr().err)
    assert not (tmp_path / "x.svg").exists()


def test_dtype_without_input_shape_is_refused(factory_file: Path, tmp_path: Path,
                                              capsys) -> None:
    # the factory gives its own inputs: --dtype was never read, not even checked
    (factory_file.parent / "own.py").write_text(
        "import torch\n"
        "def made():\n    return torch.nn.Linear(2, 2), torch.randn(1, 2)\n",
        encoding="utf-8")
    assert main(["render", f"{factory_file.parent / 'own.py'}:made", "-o",
                 str(tmp_path / "x.svg"), "--dtype", "not_a_dtype"]) == 1
    assert "--dtype is the dtype of the inputs --input-shape makes" in \
        capsys.readouterr().err
    assert not (tmp_path / "x.svg").exists()


def test_a_shape_error_carries_the_note_naming_the_call(factory_file: Path, tmp_path: Path,
                                                        capsys) -> None:
    argv = ["render", f"{factory_file}:model", "--input-shape", "1,5,8,8", "-o",
            str(tmp_path / "x.svg")]
    assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("torchgraphrec: error: RuntimeError: ")
    assert err[1:] == ["  torchgraphrec: raised in the call of '0' (Conv2d, call_index 0)"]


def test_float_ids_get_a_hint_to_pass_an_integer_dtype(factory_file: Path, tmp_path: Path,
                                                       capsys) -> None:
    argv = ["render", f"{factory_file}:embedder", "--input-shape", "2,4", "-o",
            str(tmp_path / "x.svg")]
    assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert "'indices'" in err[0]
    assert err[-1] == "  hint: the model takes integer ids (token ids for an embedding): pass --dtype int64"
    assert main([*argv, "--dtype", "int64"]) == 0


def test_render_dpi_sets_the_png_resolution(factory_file: Path, tmp_path: Path) -> None:
    def width(dpi: int) -> int:
        path = tmp_path / f"x{dpi}.png"
        assert main(["render", f"{factory_file}:model", "--input-shape", "1,3,8,8", "-o",
                     str(path), "--dpi", str(dpi)]) == 0
        return int.from_bytes(path.read_bytes()[16:20], "big")  # the PNG header's width

    assert abs(width(192) / width(96) - 2) < 0.05
