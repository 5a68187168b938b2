"""MkDocs hook: publish the benchmark plots and list them on the benchmarks page.

The plots live in ``bench/results/`` beside the JSON they are drawn from, outside the docs
directory. This hook adds each PNG found there to the site as ``benchmarks/plots/NAME.png``
and replaces the marker ``<!-- bench-plots -->`` on ``benchmarks.md`` with one image per PNG,
so the page shows exactly the plots that exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

MARKER = "<!-- bench-plots -->"
PAGE = "benchmarks.md"
SITE_DIR = "benchmarks/plots"


def _plots(config: Any) -> list[Path]:
    results = Path(config.config_file_path).parent / "bench" / "results"
    return sorted(results.glob("*.png"))


def on_files(files: Files, config: Any) -> Files:
    for png in _plots(config):
        files.append(File.generated(config, f"{SITE_DIR}/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri != PAGE or MARKER not in markdown:
        return markdown
    figures = [
        f"### `{png.stem}`\n\n![{png.stem}: bench/results/{png.name}]({SITE_DIR}/{png.name})\n"
        for png in _plots(config)
    ]
    body = "\n".join(figures) if figures else "No plot in `bench/results/` yet.\n"
    return markdown.replace(MARKER, body)
