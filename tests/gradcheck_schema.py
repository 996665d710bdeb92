#!/usr/bin/env python3
"""Validates tapegrad-gradcheck's --format json output against its schema
(schema 1, docs/gradcheck.md "Results for programs"): every field of every
object, its type, and no field the schema does not name.

    python3 tests/gradcheck_schema.py FILE...   exit 0 when every file fits

The schema below is the documented one, field for field; a field the tool
adds must be added here and to the docs (a new schema number when a field
is renamed, removed or changes meaning)."""
import json
import sys

SCHEMA = 1

# types: "str", "int", "num" (a number, or null for NaN and infinities),
# "bool", "?T" (T or null), [T] (a list of T), or the name of an object
# below: exactly its keys ("?key": may be absent; "*": any keys, one type)
VERDICT = "verdict"
REASON = "reason"
MODE = "mode"  # the library's modes (tg_gradcheck_mode_name)

OBJECTS = {
    "document": {
        "schema": "int", "tool": "str", "version": "str", "command": "str", "settings": "settings",
        "seeds": ["int"], "checks": ["check"], "batches": ["batch"], "summary": "summary",
        # one of these, by command
        "?sweep": "sweep", "?jacobians": ["jacobian"],
    },
    "settings": {
        "op": "?str", "inject": "?str", "shape": "?str", "dtype": "?str", "mode": MODE, "order": "int",
        "modes": ["str"], "scheme": "str", "step": "str", "atol_scale": "str", "h": "num", "atol": "num",
        "rtol": "num", "cover": "bool",
    },
    "check": {
        "op": "str", "bug": "?str", "function": "str", "spec": "str", "dtype": "str", "input_names": ["str"],
        "seed": "int", "input_seed": "int", "probe_seed": "int", "order": "int", "mode": "str",
        "coverage": ["coverage"], "error": "?str", "result": "?result",
        "?values": "values", "?elements": ["element"],
    },
    "result": {
        "pass": "bool", "verdict": VERDICT, "reason": REASON, "mode": MODE, "forward_diff": "bool", "step": "str",
        "h": "num", "atol_scale": "str", "atol": "num", "rtol": "num", "dtype": "str", "eps": "num", "seed": "int",
        "n_checked": "int", "n_failed": "int", "n_wrong": "int", "n_evals": "int", "n_backwards": "int",
        "max_abs_err": "num", "max_rel_err": "num", "max_excess": "num", "fail_excess": "num",
        "worst_input": "?str", "worst_index": "int", "worst_output": "int", "worst_analytic": "num",
        "worst_numeric": "num", "worst_ratio": "num", "step_vanished": "bool", "vanished_input": "?str",
        "vanished_index": "int", "joint": ["str"], "inputs": ["input"],
    },
    "input": {
        "name": "str", "checked": "bool", "pass": "bool", "verdict": VERDICT, "reason": REASON,
        "n_checked": "int", "n_failed": "int", "n_wrong": "int", "n_resolved": "int", "constant": "bool",
        "max_abs_err": "num", "max_rel_err": "num", "worst_index": "int", "worst_output": "int",
        "worst_analytic": "num", "worst_numeric": "num", "worst_ratio": "num", "worst_step": "num",
        "worst_bound": "num", "step_min": "num", "step_max": "num", "scale": "num", "grad_scale": "num",
        "atol_used": "num", "max_excess": "num", "fail_excess": "num", "pred_max": "num", "pred_trunc": "num",
        "pred_round": "num",
    },
    "element": {
        "input": "str", "index": "int", "output": "int", "analytic": "num", "numeric": "num", "step": "num",
        "tol": "num", "bound": "num", "pass": "bool",
    },
    "batch": {
        "op": "str", "bug": "?str", "function": "str", "spec": "str", "dtype": "str", "order": "int", "mode": "str",
        "seeds": ["int"], "runs": "int", "errors": "int", "inputs": ["batch_input"],
    },
    "batch_input": {
        "name": "str", "runs": "int", "pass": "int", "wrong": "int", "inconclusive": "int", "verdict": VERDICT,
        "reason": REASON, "pass_rate": "num", "rel_err": "quantiles", "ratio": "quantiles", "excess": "quantiles",
        "pred_rel": "quantiles", "coverage": "?coverage",  # null: --mode fast's joint row
    },
    # what one input held (over a batch: every seed's values)
    "coverage": {
        "name": "str", "numel": "int", "min": "num", "max": "num", "n_neg": "int", "n_zero": "int", "n_pos": "int",
        "decade_min": "?int", "decade_max": "?int", "regions_seen": ["str"], "regions_not_seen": ["str"],
    },
    "quantiles": {"p50": "num", "p90": "num", "p99": "num", "max": "num"},
    "values": {"*": "input_values"},  # keyed by the input's name
    "input_values": {"shape": ["int"], "differentiable": "bool", "values": ["num"]},
    "summary": {
        "verdict": VERDICT, "pass": "bool", "exit_status": "int", "ops": "int", "cases": "int", "inputs": "tally",
        "checks": "tally", "seconds": "num", "check_seconds": "num",
    },
    "tally": {"pass": "int", "wrong": "int", "inconclusive": "int", "errors": "int"},
    "sweep": {"op": "str", "bug": "?str", "spec": "str", "mode": MODE, "step": "str", "h": ["num"],
              "curves": ["curve"]},
    "curve": {"dtype": "str", "scheme": "str", "vanished": ["int"], "all": "curve_all", "inputs": ["curve_input"]},
    "curve_all": {"median": ["num"], "predicted": ["num"], "best_h": "num", "theory_h": "num"},
    "curve_input": {"name": "str", "scale": "num", "median": ["num"], "p10": ["num"], "p90": ["num"],
                    "predicted": ["num"], "best_h": "num", "best_rel_err": "num", "theory_h": "num"},
    "jacobian": {"input": "str", "rows": "int", "cols": "int", "n_bad": "int", "atol": "num", "max_abs_err": "num",
                 "pred_max": "num", "pred_trunc": "num", "pred_round": "num", "analytic": [["num"]],
                 "numeric": [["num"]], "predicted": [["num"]]},
}
ENUMS = {
    VERDICT: {"pass", "wrong", "inconclusive"},
    REASON: {"none", "all-zero", "unresolved", "empty", "error"},
    MODE: {"full", "directional", "jacobian", "fast"},
}


def check(value, kind, path, errors):
    if isinstance(kind, list):
        if not isinstance(value, list):
            errors.append(f"{path}: want a list, got {type(value).__name__}")
            return
        for i, v in enumerate(value):
            check(v, kind[0], f"{path}[{i}]", errors)
        return
    if kind.startswith("?"):
        if value is None:
            return
        kind = kind[1:]
    if kind in ENUMS:
        if value not in ENUMS[kind]:
            errors.append(f"{path}: {value!r} is not one of {sorted(ENUMS[kind])}")
        return
    if kind in OBJECTS:
        if not isinstance(value, dict):
            errors.append(f"{path}: want an object ({kind}), got {type(value).__name__}")
            return
        fields = OBJECTS[kind]
        if "*" in fields:  # any keys, each of one type
            for key, v in value.items():
                check(v, fields["*"], f"{path}.{key}", errors)
            return
        known = {k.lstrip("?") for k in fields}
        for key, sub in fields.items():
            name = key.lstrip("?")
            if name not in value:
                if not key.startswith("?"):
                    errors.append(f"{path}: no field '{name}' ({kind})")
                continue
            check(value[name], sub, f"{path}.{name}", errors)
        for key in value:
            if key not in known:
                errors.append(f"{path}: field '{key}' is not in the schema ({kind})")
        return
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "num": value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)),
        "bool": isinstance(value, bool),
    }.get(kind)
    if ok is None:
        errors.append(f"{path}: unknown schema type {kind}")
    elif not ok:
        errors.append(f"{path}: want {kind}, got {value!r}")


def validate(doc):
    errors = []
    check(doc, "document", "$", errors)
    if not errors:
        if doc["schema"] != SCHEMA:
            errors.append(f"$.schema: {doc['schema']}, want {SCHEMA}")
        if doc["tool"] != "tapegrad-gradcheck":
            errors.append(f"$.tool: {doc['tool']!r}")
        if doc["command"] not in ("check", "sweep", "jacobian"):
            errors.append(f"$.command: {doc['command']!r}")
        if doc["command"] == "sweep" and "sweep" not in doc:
            errors.append("$: a sweep without 'sweep'")
        s = doc["summary"]
        want = {"pass": 0, "wrong": 1, "inconclusive": 3}[s["verdict"]]
        if s["exit_status"] != want or s["pass"] != (s["verdict"] == "pass"):
            errors.append(f"$.summary: verdict {s['verdict']}, pass {s['pass']}, exit status {s['exit_status']}")
        for i, c in enumerate(doc["checks"]):
            if (c["error"] is None) == (c["result"] is None):
                errors.append(f"$.checks[{i}]: want exactly one of error and result")
    return errors


def main(paths):
    bad = 0
    for p in paths:
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{p}: not JSON: {e}")
            bad += 1
            continue
        errors = validate(doc)
        for e in errors[:20]:
            print(f"{p}: {e}")
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
