"""Files by subject: no product module grows past about 500 lines (issue 19 split the seven-job
reconciler, the proxy app, severity and the reader; this keeps them split)."""

from __future__ import annotations

from pathlib import Path

LIMIT = 500
PRODUCT = Path(__file__).resolve().parents[2] / "lockstep"


def test_no_product_module_is_over_the_limit() -> None:
    sizes = {str(path.relative_to(PRODUCT)): len(path.read_text().splitlines()) for path in PRODUCT.rglob("*.py")}
    assert len(sizes) > 50  # the scan found the package
    assert {path: lines for path, lines in sizes.items() if lines > LIMIT} == {}
