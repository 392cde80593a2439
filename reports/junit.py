"""A CI gate's checks as JUnit XML, the test report GitHub Actions, GitLab and Jenkins read:
one test suite per runbook, one test case per check, a failure for a check that fails
(its figure and confidence as the message), the verdict's figure on every case. Written
with the standard library's ElementTree, which escapes every text and attribute."""
from __future__ import annotations

import xml.etree.ElementTree as ET


def junit_xml(playbook: str, checked, strict: bool = False, seeds: dict | None = None, seconds: float = 0.0) -> bytes:
    """``checked`` (``batch.gate.Checked``: runbook, check, metric, threshold, verdict) as
    a JUnit XML document (UTF-8 bytes); ``strict``: a verdict not proven fails too;
    ``seeds``: runbook -> seeds played; ``seconds``: the gate's wall time."""
    by_runbook: dict[str, list] = {}
    for c in checked:
        by_runbook.setdefault(c.runbook, []).append(c)
    failures_in_all = sum(c.failed(strict) for c in checked)
    root = ET.Element("testsuites", name=f"gameday check {playbook}", tests=str(len(checked)),
                      failures=str(failures_in_all), errors="0", time=f"{seconds:.3f}")
    for runbook, cases in by_runbook.items():
        suite = ET.SubElement(root, "testsuite", name=f"{playbook} / runbook {runbook}", tests=str(len(cases)),
                              failures=str(sum(c.failed(strict) for c in cases)), errors="0", skipped="0",
                              time="0")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="playbook", value=playbook)
        ET.SubElement(props, "property", name="runbook", value=runbook)
        if seeds and runbook in seeds:
            ET.SubElement(props, "property", name="seeds", value=str(seeds[runbook]))
        for c in cases:
            case = ET.SubElement(suite, "testcase", classname=f"gameday.{playbook}.{runbook}", name=c.check, time="0")
            v = c.verdict
            said = f"{c.metric} {c.threshold}: {v.figure}; {v.confidence}"
            if c.failed(strict):
                why = "not proven" if v.passed else "failed"
                failure = ET.SubElement(case, "failure", message=f"{why}: {said}", type=why.replace(" ", "_"))
                failure.text = said
            ET.SubElement(case, "system-out").text = said
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
