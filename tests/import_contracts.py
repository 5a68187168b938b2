"""An import-linter contract type of our own: ``own_imports``.

smr.ring and smr.checkpoint are pure logic installed under smr: of smr they may import only
themselves (and checkpoint, ring), never the rest of the package, not even a module as
harmless as smr.wording, which a forbidden contract would have to name one by one.
Registered in pyproject.toml's ``[tool.importlinter]`` (``contract_types``); lint-imports
runs from the repository, which is on its import path.
"""

from __future__ import annotations

from typing import Any

from importlinter import Contract, ContractCheck, fields, output


def _within(module: str, packages: set[str]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


class OwnImportsContract(Contract):
    """Each of ``source_modules`` (and its descendants) imports, of ``container``, only
    modules within ``allowed_modules``."""

    type_name = "own_imports"

    container = fields.StringField()
    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        container = str(self.container)
        allowed = {module.name for module in self.allowed_modules}  # type: ignore[attr-defined]
        violations = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            for importer in sorted({source.name} | graph.find_descendants(source.name)):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if _within(imported, {container}) and not _within(imported, allowed):
                        violations.append((importer, imported))
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported in check.metadata["violations"]:
            output.print_error(f"{importer} imports {imported}")
            output.new_line()
