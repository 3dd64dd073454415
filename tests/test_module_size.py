"""No product module is over 600 lines (STYLE: small modules with one concern): one past it is
split by concern, within its package's import-linter floors, not waved through."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("catalog", "conf", "contract", "hydra_plugins", "infra", "jobs", "trainer")
"""The product's packages (pyproject's "the product never imports the tests" contract)."""
MAX_LINES = 600


def product_modules() -> list[Path]:
    return sorted(
        path
        for package in PRODUCT
        for path in (REPO / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def test_no_product_module_is_over_600_lines():
    modules = product_modules()
    assert len(modules) > 100  # the walk found the product, not an empty tree
    over = {
        str(path.relative_to(REPO)): lines
        for path in modules
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert over == {}, f"over {MAX_LINES} lines: split by concern"
