"""EAS's other shapes of its scaling sections, made Wharf's canonical ones. Pure.

- The legacy autoscaler form of EAS's parameter appendix, `"strategies": {"qps": 10}`, is
  `scaleStrategies: [{"metricName": "qps", "threshold": 10}]`; both at once is an error.
- `cronscaler` in the PascalCase of EAS's API (`ScaleJobs[{Name, Schedule, TargetSize,
  TimeZone}]`, `ExcludeDates`) is the camelCase its autoscaler uses (contracts.spec_cron).
"""

from __future__ import annotations

CRON_KEYS = {"ScaleJobs": "scaleJobs", "ExcludeDates": "excludeDates"}
JOB_KEYS = {"Name": "name", "Schedule": "schedule", "TargetSize": "targetSize",
            "TimeZone": "timeZone"}  # fmt: skip


def scaling_forms(data: dict, errors: dict[str, list[str]]) -> None:
    """Rewrite `data` (the canonical document being built) in place; clashes into `errors`."""
    scaler = data.get("autoscaler")
    if isinstance(scaler, dict) and isinstance(scaler.get("strategies"), dict):
        if "scaleStrategies" in scaler:
            errors["autoscaler.strategies"] = [
                "given with autoscaler.scaleStrategies: give the strategies once, in one form"
            ]
        else:
            legacy = scaler.pop("strategies")
            scaler["scaleStrategies"] = [
                {"metricName": name, "threshold": threshold} for name, threshold in legacy.items()
            ]
    cron = data.get("cronscaler")
    if isinstance(cron, dict):
        _rename(cron, CRON_KEYS, "cronscaler", errors)
        jobs = cron.get("scaleJobs")
        for i, job in enumerate(jobs if isinstance(jobs, list) else []):
            if isinstance(job, dict):
                _rename(job, JOB_KEYS, f"cronscaler.scaleJobs[{i}]", errors)


def _rename(node: dict, names: dict[str, str], where: str, errors: dict[str, list[str]]) -> None:
    for pascal, camel in names.items():
        if pascal not in node:
            continue
        if camel in node:
            errors[f"{where}.{camel}"] = [f"given twice (also as {pascal}); give it once"]
            continue
        node[camel] = node.pop(pascal)
