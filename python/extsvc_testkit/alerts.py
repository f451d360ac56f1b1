"""The alert rules of docs/metrics.md, fed through `promtool test rules` with the series a real
server exported (test/e2e/test_ops.py, test/e2e/test_alerts.py).

scrape(pg) reads extsvc.metrics_prometheus() once, labelled as Prometheus would label it;
assert_fires(alert, scrapes, workdir) gives promtool those scrapes one minute apart, the last one
held for hold_minutes, and checks that the alert fires (or not) at the end: the rule as documented,
the values as exported.
"""
import json
import os
import re
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def rules_file(workdir):
    """The rules block of docs/metrics.md as a rules file (the documented rules are the tested ones)."""
    with open(os.path.join(ROOT, "docs", "metrics.md")) as f:
        text = f.read()
    block = re.search(r"```yaml\n(groups:.*?)```", text, re.S).group(1)
    path = os.path.join(workdir, "extsvc_rules.yml")
    with open(path, "w") as f:
        f.write(block)
    return path


def rule_names():
    with open(os.path.join(ROOT, "docs", "metrics.md")) as f:
        return re.findall(r"^  - alert: (\w+)", f.read(), re.M)


class Scrape(dict):
    """{series text: value} of one scrape, and when it was taken (.t, Unix seconds)."""
    t = 0.0


def scrape(pg, instance="pg", job="extsvc"):
    """One scrape: {series text: value} of extsvc.metrics_prometheus(), as Prometheus would label it."""
    out = Scrape()
    out.t = time.time()
    for line in pg.one("SELECT extsvc.metrics_prometheus()").splitlines():
        m = SAMPLE.match(line)
        if not m or line.startswith("#"):
            continue
        labels = (m.group(2) or "{}")[1:-1]
        labels = f'instance="{instance}",job="{job}"' + ("," + labels if labels else "")
        out[f"{m.group(1)}{{{labels}}}"] = float(m.group(3).replace("Inf", "inf"))
    return out


def merge(*scrapes):
    """One scrape of several servers (different instance labels): the union of their series."""
    out = Scrape()
    out.t = max(s.t for s in scrapes)
    for s in scrapes:
        out.update(s)
    return out


def _is_counter(name):
    base = name.split("{")[0]
    return base.endswith("_total") or base.endswith("_count") or base.endswith("_bucket") or base.endswith("_sum")


def assert_fires(alert, scrapes, workdir, hold_minutes=0, fires=True, growing=True, rates=False):
    """Feeds promtool the series of scrapes (one per minute), the last held for hold_minutes, and
    checks that alert fires (or not) at the end: the rule as documented, the values as exported.

    While held, an age (`*_age_seconds`) that grew between the last two scrapes keeps growing with
    the clock (60 s a minute) unless growing=False; every other value stays as last exported.
    With rates=True a counter that grew between the last two scrapes keeps growing at the rate
    measured between them (per second of real time, from the scrapes' times): the failure goes on
    as it was seen. Returns promtool's output."""
    series = sorted(set().union(*scrapes))
    steps = len(scrapes) + hold_minutes
    dt = scrapes[-1].t - scrapes[-2].t if len(scrapes) > 1 and hasattr(scrapes[-1], "t") else 0
    input_series = []
    for name in series:
        vals = [sc.get(name) for sc in scrapes]
        last = vals[-1]
        prev = vals[-2] if len(vals) > 1 else None
        grew = last is not None and prev is not None and last > prev
        step = 0.0
        if grew and growing and name.split("{")[0].endswith("_age_seconds") and last > 0:
            step = 60.0
        elif grew and rates and _is_counter(name) and dt > 0:
            step = (last - prev) / dt * 60.0
        vals += [None if last is None else last + step * (i + 1) for i in range(hold_minutes)]
        input_series.append({"series": name,
                             "values": " ".join("_" if v is None else repr(v) for v in vals)})
    workdir = os.path.join(workdir, "promtool")
    os.makedirs(workdir, exist_ok=True)
    rules = rules_file(workdir)
    test = {"rule_files": [rules], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series,
                       "alert_rule_test": [{"eval_time": f"{steps - 1}m", "alertname": alert,
                                            "exp_alerts": []}]}]}
    # ask promtool with no expected alert: it prints what fired, and we read the labels
    path = os.path.join(workdir, f"{alert}.yml")
    with open(path, "w") as f:
        json.dump(test, f)  # JSON is YAML
    r = subprocess.run(["promtool", "test", "rules", path], capture_output=True, text=True)
    # it fired when promtool got an alert where none was expected ("Labels:{alertname=...")
    fired = r.returncode != 0 and f'alertname="{alert}"' in (r.stdout + r.stderr)
    if r.returncode != 0 and not fired:
        raise AssertionError(f"promtool failed: {r.stdout}{r.stderr}")
    if fired != fires:
        raise AssertionError(f"{alert}: fired={fired}, wanted {fires}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr
