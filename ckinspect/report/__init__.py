"""Renderers of one report: JSON (schema 1, the stable contract), text (rich) and Markdown.

`json_report.build(checkpoints)` makes the data; `text.render` and `markdown.render` draw that same
dict, so the three formats can never disagree. No torch, no textual.
"""
