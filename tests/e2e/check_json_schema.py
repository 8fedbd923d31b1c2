#!/usr/bin/env python3
"""Validates generated outputs against a JSON Schema with Python's jsonschema.

Usage: check_json_schema.py SCHEMA_FILE OUTPUTS_FILE
OUTPUTS_FILE holds one JSON string per line: the text a request generated.
Prints each output that is not JSON or not valid under the schema, then a
summary line; exits 1 if any failed.
"""
import json
import sys

import jsonschema


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    failed = 0
    total = 0
    with open(sys.argv[2], encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            total += 1
            text = json.loads(line)
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                failed += 1
                print(f"output {lineno}: not JSON ({e}): {text!r}")
                continue
            errors = list(validator.iter_errors(value))
            if errors:
                failed += 1
                print(f"output {lineno}: {errors[0].message}: {text!r}")
    print(f"{total} outputs checked, {failed} invalid")
    return 1 if failed or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
