"""The documentation builds strictly (a broken link or anchor, or a page left out of the nav, fails), every
page is in the nav, and the README, the newcomer's page, starts with the two set-up commands and links
only to files that exist."""
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def nav_pages(nav) -> list[str]:
    """The files a mkdocs nav names, nested sections included."""
    out = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_docs_build_strictly(tmp_path):
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                        "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "site" / "add-a-model" / "index.html").exists()


def test_every_docs_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages
    assert len(listed) == len(set(listed))


def test_readme_starts_with_the_two_commands_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```bash\n")[1].split("```")[0].splitlines()
    assert [line.split()[:2] for line in first_block] == [["make", "run"], ["make", "test"]]
    assert text.index("```bash\nmake run") < text.index("\n## ")  # before any section
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert "docs/trust.md" in links and "docs/add-a-model.md" in links
    for link in links:
        assert (ROOT / link).exists(), link
    assert (DOCS / "trust.md").read_text().startswith("# What fourdb trusts\n")
    assert "## What fourdb trusts" in text  # the section the command-line help refers to


RUN_DOC_MODELS = r"""
import re, sys, types, yaml
sys.path.insert(0, {tests!r})
from conftest import config
from fourdb.experiment.run import run_experiment
page = open({page!r}).read()
blocks = re.findall(r"`fourdb/models/(\w+)\.py`:\n\n```python\n(.*?)```", page, re.S)
params = {{m: yaml.safe_load(y)["params"]
          for m, y in re.findall(r"`conf/model/(\w+)\.yaml`:\n\n```yaml\n(.*?)```", page, re.S)}}
assert len(blocks) == 3 and set(params) == {{name for name, _ in blocks}}, (blocks, params)
for name, code in blocks:
    module = types.ModuleType(f"fourdb.models.{{name}}")
    exec(compile(code, module.__name__, "exec"), module.__dict__)
    sys.modules[module.__name__] = module
for name, _ in blocks:
    graph = name == "meanconv"
    overrides = ["dataset=synthetic", "dataset.params.size=200", "task=taste", "trainer.progress=false",
                 "trainer.epochs=2", "model=gbdt", f"model.name={{name}}", "~model.params",
                 *(f"+model.params.{{k}}={{v}}" for k, v in params[name].items()),
                 *(["graph=r2n", "sampler.fanouts=[5,5]"] if graph else [])]
    metrics = run_experiment(config(*overrides))["metrics"]
    print(name, metrics["test"]["auroc"])
    assert 0.0 <= metrics["test"]["auroc"] <= 1.0
"""


def test_the_add_a_model_examples_run_as_written():
    """The page's three models (graph, neural tabular, self-fitting tabular), taken from its code blocks
    with their YAML params, train and score through ``run_experiment``: the page cannot drift from the API."""
    script = RUN_DOC_MODELS.format(tests=str(ROOT / "tests"), page=str(DOCS / "add-a-model.md"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line.split()[0] for line in done.stdout.splitlines()] == ["meanconv", "shallow", "linear"]
