"""`--json` documents name their schema in "$schema": the $id of a file under docs/schema/ they validate against."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from harness.results.evidence import CELL_SCHEMA, COMPARE_SCHEMA

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schema"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


@pytest.mark.parametrize("named, file", [(CELL_SCHEMA, "cell-document.v1.json"),
                                         (COMPARE_SCHEMA, "compare-document.v1.json")])
def test_the_name_a_document_carries_is_its_schema_s_id_and_the_file_is_named_after_it(named, file):
    assert schema(file)["$id"] == named
    assert named.rsplit("/", 1)[1] == file
    assert schema(file)["properties"]["$schema"]["type"] == "string"


def test_run_json_names_the_cell_document_schema_and_validates_against_it(bisect, residual_norm):
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0", "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert next(iter(doc)) == "$schema" and doc["$schema"] == CELL_SCHEMA
    jsonschema.Draft202012Validator(schema("cell-document.v1.json")).validate(doc)
    with pytest.raises(jsonschema.ValidationError):  # the key is typed, not merely let through
        jsonschema.Draft202012Validator(schema("cell-document.v1.json")).validate({**doc, "$schema": 1})
