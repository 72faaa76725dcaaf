"""`autotune report`: one self-contained HTML page whose figures show what the database holds, checked by
parsing the page and by rendering it in a real headless browser."""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from synthetic_db import FAMILIES, MS, Filled, fill, verify_json

from autotune.cli import main
from autotune.cli.reporting.svg import PALETTE, speedup_color
from autotune.db import Store

KINDS = ("heatmap", "backends", "roofline", "curves", "bars")


@dataclass
class Mark:
    """One element of a figure: its tag, attributes and the figure kind it sits in."""

    tag: str
    attrs: dict[str, str]
    figure: str


@dataclass
class Page(HTMLParser):
    """The figures of a page: per figure its kind and the number of elements inside it, and every element
    inside a figure; plus every tag and attribute of the page."""

    figures: list[tuple[str, int]] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    tags: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self._open: list[str] = []  # the figure kind, while inside an <svg class="figure">
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "svg" and "figure" in a.get("class", ""):
            self.figures.append((a.get("data-figure", ""), 0))
            self._open.append(a.get("data-figure", ""))
            self._depth = 0
        elif self._open:
            kind, n = self.figures[-1]
            self.figures[-1] = (kind, n + 1)
            self.marks.append(Mark(tag, a, self._open[-1]))
            if tag == "svg":
                self._depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg" and self._open:
            self._open.pop()

    def of(self, figure: str, cls: str) -> list[dict[str, str]]:
        return [m.attrs for m in self.marks if m.figure == figure and cls in m.attrs.get("class", "").split()]


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Filled, dict[int, tuple[float, float]]]:
    """A report of a database of two GPUs of random measurements, with a verify report."""
    tmp = tmp_path_factory.mktemp("report")
    db = tmp / "tuned.db"
    rng = random.Random(7)
    with Store(str(db)) as store:
        filled = fill(store, rng, ("gfx942", "gfx950"))
    verify = verify_json(tmp / "verify.json", rng)
    out = tmp / "report.html"
    assert main(["report", "--db", str(db), "--out", str(out), "--verify", str(tmp / "verify.json")]) == 0
    return out, filled, verify


def test_the_page_holds_every_figure_of_each_gpu(report: tuple[Path, Filled, dict]) -> None:
    path, _, _ = report
    page = parse(path.read_text(encoding="utf-8"))
    kinds = [k for k, _ in page.figures]
    # per GPU: a heatmap, a backend grid and a roofline of gemm, one profile curve, the sweeps' bars;
    # then the verify report's curves
    assert kinds.count("heatmap") == kinds.count("backends") == kinds.count("roofline") == 2
    assert kinds.count("bars") == 2 and kinds.count("curves") == 3
    assert all(n > 0 for _, n in page.figures)
    gpus = [a for t, a in page.tags if t == "section" and a.get("class") == "gpu"]
    assert len(gpus) == 2


def test_the_heatmap_and_backend_cells_hold_the_winners(report: tuple[Path, Filled, dict]) -> None:
    path, filled, _ = report
    page = parse(path.read_text(encoding="utf-8"))
    cells = page.of("heatmap", "cell")
    backends = page.of("backends", "cell")
    assert len(cells) == len(backends) == 2 * len(FAMILIES) * len(MS)
    n = len(FAMILIES) * len(MS)
    for gpu, arch in enumerate(("gfx942", "gfx950")):  # sections in the order the GPUs were stored
        for cell, grid in zip(cells[gpu * n : (gpu + 1) * n], backends[gpu * n : (gpu + 1) * n], strict=True):
            m = int(cell["data-m"])
            n_, k_ = (int(x) for x in re.findall(r"[NK]=(\d+)", cell["data-row"]))
            problem = next(p for (a, p) in filled.best if a == arch and (m, n_, k_) == (p.M, p.N, p.K))
            best_us, config = filled.best[(arch, problem)]
            assert float(cell["data-speedup"]) == pytest.approx(
                filled.vendor[(arch, problem)] / best_us, rel=1e-3
            )
            assert (grid["data-row"], grid["data-m"]) == (cell["data-row"], cell["data-m"])
            assert grid["data-backend"] == config.backend
    # the colour of a cell follows its speed-up
    text = path.read_text(encoding="utf-8")
    first = cells[0]
    assert speedup_color(float(first["data-speedup"])) in text


def test_the_roofline_profile_verify_and_cost_figures_hold_the_data(
    report: tuple[Path, Filled, dict],
) -> None:
    path, filled, verify = report
    text = path.read_text(encoding="utf-8")
    page = parse(text)
    points = page.of("roofline", "point")
    assert len(points) == 2 * len(FAMILIES) * len(MS)
    flops_per_byte = {round(p.arithmetic_intensity(), 3) for (_, p) in filled.best}
    assert {round(float(p["data-intensity"]), 3) for p in points} <= {
        float(f"{x:.4g}") for x in flops_per_byte
    }
    assert len(page.of("roofline", "roof")) == 2  # both GPUs' peaks are known
    series = page.of("curves", "series")
    # two GPUs' M profile (fastest candidate and vendor) and the verify report (served and vendor)
    assert [s["data-name"] for s in series] == ["fastest candidate", "vendor"] * 2 + ["served", "vendor"]
    assert all(int(s["data-points"]) == 4 for s in series)
    assert "attn.o gemm N=8192 K=8192" in text and f"M={max(verify)}" in text
    bars = page.of("bars", "bar")
    assert [b["data-label"] for b in bars] == ["#1 synthetic", "#2 synthetic"]
    costs = [a for t, a in page.tags if t == "table" and a.get("class") == "costs"]
    assert len(costs) == 2


def test_the_page_fetches_nothing(report: tuple[Path, Filled, dict]) -> None:
    path, _, _ = report
    page = parse(path.read_text(encoding="utf-8"))
    assert not [t for t, _ in page.tags if t in ("script", "link", "img", "iframe", "object")]
    for _, attrs in page.tags:
        for name in ("src", "href"):
            assert not attrs.get(name, "#").strip() or attrs.get(name, "#").startswith("#"), attrs


def test_nothing_to_show_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.db"
    Store(str(empty)).close()
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(empty), "--out", str(out)]) == 1
    assert "nothing to show" in capsys.readouterr().out and out.exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": 3}')
    assert main(["report", "--db", str(empty), "--out", str(out), "--verify", str(bad)]) == 2
    assert "not a JSON report of `autotune verify`" in capsys.readouterr().err
    assert main(["report", "--db", str(tmp_path / "typo.db"), "--out", str(out)]) == 2
    assert "no database at" in capsys.readouterr().err and not (tmp_path / "typo.db").exists()


def test_a_gpu_of_predictions_is_marked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from synthetic_db import VENDOR, timed, triton

    from autotune import Problem, Target
    from autotune.core.result import Source

    db = tmp_path / "p.db"
    target = Target.for_arch("gfx950")
    with Store(str(db)) as store:
        p = Problem.of("gemm", 32, 2048, 2048)
        for config, us in ((VENDOR, 9.0), (triton(32, 4), 6.0)):
            store.record(
                target=target,
                kernel="gemm." + config.backend,
                source_hash="v",
                problem=p,
                result=timed(config, us),
                source=Source.MODEL,
            )
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "Predicted, not measured" in text
    assert [c["data-speedup"] for c in parse(text).of("heatmap", "cell")] == ["1.5"]


# -- in a real browser -------------------------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


needs_browser = pytest.mark.skipif(
    browser() is None, reason="no headless browser (chromium) on this machine: `apt-get install chromium`"
)


def headless(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = browser()
    assert exe is not None
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True)


@needs_browser
def test_a_headless_browser_renders_every_figure(report: tuple[Path, Filled, dict], tmp_path: Path) -> None:
    path, _, _ = report
    dom = headless(tmp_path, "--dump-dom", path.as_uri()).stdout
    rendered, written = parse(dom), parse(path.read_text(encoding="utf-8"))
    assert [k for k, _ in rendered.figures] == [k for k, _ in written.figures]
    assert all(n > 0 for _, n in rendered.figures)
    assert len(rendered.of("heatmap", "cell")) == len(written.of("heatmap", "cell")) > 0
    assert len(rendered.of("roofline", "point")) == len(written.of("roofline", "point")) > 0


@needs_browser
def test_the_browser_paints_the_figures(report: tuple[Path, Filled, dict], tmp_path: Path) -> None:
    path, _, _ = report
    shot = tmp_path / "shot.png"
    headless(tmp_path, f"--screenshot={shot}", "--window-size=1200,1400", path.as_uri())
    colors = png_colors(shot.read_bytes())
    # the backend grid's cells of the first GPU (torch, triton) are filled with the palette's first colours
    for hex_color in PALETTE[:2]:
        rgb = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
        assert colors.get(rgb, 0) > 50, (hex_color, sorted(colors.items(), key=lambda kv: -kv[1])[:8])


def png_colors(data: bytes) -> dict[tuple[int, ...], int]:
    """Pixel counts per RGB colour of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and ctype in (2, 6) and interlace == 0
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev = bytearray(stride)
    counts: dict[tuple[int, ...], int] = {}
    for y in range(height):
        filt, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if filt == 1:
                line[i] = (line[i] + a) & 0xFF
            elif filt == 2:
                line[i] = (line[i] + b) & 0xFF
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        for x in range(0, stride, bpp):
            key = tuple(line[x : x + 3])
            counts[key] = counts.get(key, 0) + 1
        prev = line
    return counts


def test_a_model_specs_layers_name_the_rows(tmp_path: Path) -> None:
    from synthetic_db import VENDOR, timed, triton

    from autotune import Target
    from autotune.sweeps import load_spec
    from autotune.sweeps.spec import EMBEDDED

    spec = load_spec("llama-3.1-70b-mi300x")
    layers = spec.layers()
    rng = random.Random(8)
    picked = rng.sample(sorted(layers, key=lambda p: p.key()), 3)
    target = Target.for_arch("gfx942")
    db = tmp_path / "model.db"
    with Store(str(db)) as store:
        text = (EMBEDDED / "llama-3.1-70b-mi300x.toml").read_text()
        sweep = store.start_sweep(spec.name, text, target)
        for p in picked:
            for config, us in ((VENDOR, rng.uniform(5, 9)), (triton(16, 4), rng.uniform(4, 9))):
                store.record(
                    target=target,
                    kernel="gemm." + config.backend,
                    source_hash="v",
                    problem=p,
                    result=timed(config, us),
                    sweep_id=sweep,
                )
        store.finish_sweep(sweep)
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--out", str(out)]) == 0
    rows = {c["data-row"] for c in parse(out.read_text(encoding="utf-8")).of("heatmap", "cell")}
    assert rows == {f"{layers[p]}: N={p.N} K={p.K} bf16 B:nk" for p in picked}


def test_the_figures_encode_their_values() -> None:
    from autotune.cli.reporting import svg

    assert speedup_color(1.0) == "#ffffff" and speedup_color(None) == svg.EMPTY
    rng = random.Random(9)
    for _ in range(20):
        x = rng.uniform(1.05, 8.0)
        faster, slower = speedup_color(x), speedup_color(1 / x)
        g_r = int(faster[3:5], 16) - int(faster[1:3], 16)
        r_g = int(slower[1:3], 16) - int(slower[3:5], 16)
        assert g_r > 0 and r_g > 0  # faster is green, slower is red
        assert speedup_color(x * 1.5) <= faster or x * 1.5 > 4  # greener (lower red) as it grows, up to 4x
    points = [(rng.uniform(0.5, 500), rng.uniform(0.1, 900), "triton", "tip") for _ in range(7)]
    known = parse(svg.roofline("r", points, 1307.0, 5300.0))
    unknown = parse(svg.roofline("r", points, 0.0, 0.0))
    assert len(known.of("roofline", "roof")) == 1 and not unknown.of("roofline", "roof")
    assert len(known.of("roofline", "point")) == len(unknown.of("roofline", "point")) == 7
    bars = parse(svg.bars("b", [("a", 2.0, ""), ("b", 4.0, "")], "s")).of("bars", "bar")
    assert [float(b["data-value"]) for b in bars] == [2.0, 4.0]


def test_an_ops_speed_up_is_over_what_it_is_served_against() -> None:
    """The dense GEMM against its vendor library; the MoE against its per-expert torch loop, which no
    table serves."""
    from autotune.cli.reporting.page import _reference

    assert _reference("gemm") == "the vendor library"
    assert _reference("moe") == "its torch baseline"
