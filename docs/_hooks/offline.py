"""The site opened from disk (site/index.html, no network) is whole: diagrams and search.

- Each Mermaid diagram is drawn at build time into an SVG in the page (mermaid-render, which
  runs Mermaid's layout in an embedded JavaScript engine, no browser and no network), so no
  page loads mermaid.js from a CDN, and none shows a diagram's source as text.
- Material's offline plugin inlines the search index for file://; it would load a Worker
  shim from a CDN, which this hook replaces with ours, javascripts/file-worker.js, shipped
  in the site.
"""

from __future__ import annotations

import html
import re
from typing import Any

# What pymdownx.superfences writes for a ```mermaid block (mkdocs.yml's custom fence).
MERMAID_BLOCK = re.compile(r'<pre class="mermaid"><code>(.*?)</code></pre>', re.DOTALL)
WORKER_SHIM = "javascripts/file-worker.js"


def on_config(config: Any) -> Any:
    """Runs after the plugins' (hooks come last): drop any shim from a CDN, add ours."""
    polyfills = [url for url in config.extra.get("polyfills", []) if "://" not in url]
    config.extra["polyfills"] = [*polyfills, WORKER_SHIM]
    return config


def on_page_content(content: str, page: Any, **_: Any) -> str:
    """Every Mermaid block of the page as an SVG drawing; a diagram that does not render
    fails the build, naming the page."""
    from mermaid_render import convert

    def drawing(match: re.Match[str]) -> str:
        source = html.unescape(match.group(1))
        try:
            svg = convert(source, format="svg").decode("utf-8")
        except Exception as error:
            raise RuntimeError(
                f"{page.file.src_path}: a Mermaid diagram does not render: {error}"
            ) from None
        svg = re.sub(r"^<\?xml[^>]*>\s*", "", svg)
        return f'<figure class="diagram">{svg}</figure>'

    return MERMAID_BLOCK.sub(drawing, content)
