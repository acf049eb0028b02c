"""The report's HTML: one self-contained page (inline CSS, figures as base64 PNG ``data:`` URIs, no
script and no external resource), so that it opens offline and can be mailed as one file. Every
text is escaped (:func:`html.escape`)."""
from __future__ import annotations

import base64
import html
from typing import Sequence

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
p.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; } th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 0.8em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; } .note { color: #666; font-style: italic; }
ul.parts li { margin-bottom: 0.3em; }
"""


def text(value) -> str:
    """``value`` as escaped HTML text."""
    return html.escape(str(value))


def paragraph(value: str, cls: str = "") -> str:
    return f'<p{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>{text(value)}</p>'


def bullets(items: Sequence[str], cls: str = "") -> str:
    body = "".join(f"<li>{text(i)}</li>" for i in items)
    return f'<ul{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}>{body}</ul>'


def table(headings: Sequence[str], rows: Sequence[Sequence], numeric: Sequence[bool] = ()) -> str:
    """A table; cells are escaped, columns marked in ``numeric`` right-aligned."""
    head = "".join(f"<th>{text(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(
        f'<td{" class=" + chr(34) + "num" + chr(34) if j < len(numeric) and numeric[j] else ""}>{text(c)}</td>'
        for j, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(png: bytes, alt: str, caption: str) -> str:
    """An embedded PNG (base64 ``data:`` URI) with its caption."""
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{text(alt)}">'
            f"<figcaption>{text(caption)}</figcaption></figure>")


def section(identifier: str, title: str, body: str) -> str:
    return f'<section id="{text(identifier)}"><h2>{text(title)}</h2>{body}</section>'


def page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    """The whole document."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{text(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{text(title)}</h1><p class=\"sub\">{text(subtitle)}</p>" + "".join(sections) + "</body></html>\n")
