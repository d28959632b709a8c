"""The interactive HTML report (page data, the browser's scripts) and the writer of files."""

from torchgraphrec.report.html import report_fragment, to_html

__all__ = ["to_html", "report_fragment"]
