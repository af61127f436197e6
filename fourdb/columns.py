"""Per-dtype column preprocessing into a numeric block, a categorical-code block and raw datetimes.

Numeric: standardized, missing -> 0 plus a missing flag. Category: codes with 0 as the unknown /
missing bucket, ranked by frequency. Text: TF-IDF then truncated SVD. Datetime: month, weekday and hour
(which do not drift) plus a missing flag, and the value itself kept raw (``datetimes``, int64 ns) so it
reaches a model only relative to each seed's cutoff (``datetime_age``), never as an absolute time that
drifts between training and test. Every statistic (scales, vocabularies, TF-IDF/SVD) is fitted on the
rows known by a given time (``fit(df, until=...)``: the start of validation), never on later rows.
``transform(df, masked=...)`` encodes masked columns as missing, which is how a row-column task's seed
row hides the columns that are not known at its cutoff.

One standardizer (``fit_scale``, ``standardize``) and one category vocabulary (``fit_vocabulary``,
``codes``) serve both ``TableEncoder`` (a table's own columns) and ``encode_features`` (computed
feature columns, such as DFS's, fitted on one split); each keeps its own missing-flag rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fourdb.rdb.schema import Table
from fourdb.utils import NS_PER_DAY, to_epoch_ns

MAX_CATEGORIES = 1000  # rarer values share the unknown bucket
TEXT_DIMS = 8
MISSING_TIME = np.iinfo(np.int64).min
CHUNK_ROWS = 1 << 20  # rows encoded at once


@dataclass
class EncodedTable:
    numeric: np.ndarray  # float32 [rows, numeric_dim]
    categorical: np.ndarray  # int64 [rows, n_categorical], 0 = unknown
    cardinalities: list[int] = field(default_factory=list)
    numeric_names: list[str] = field(default_factory=list)
    categorical_names: list[str] = field(default_factory=list)
    datetimes: np.ndarray | None = None  # int64 ns [rows, n_datetime], MISSING_TIME where missing or hidden
    datetime_names: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.datetimes is None:
            self.datetimes = np.zeros((len(self.numeric), 0), np.int64)


def datetime_age(values: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """Signed log(1 + days) from each datetime to its row's cutoff (``values`` [n, k] int64 ns,
    ``cutoffs`` [n]); 0 where missing (the missing flag says so). A value after the cutoff (a planned
    date known in advance) is negative."""
    values = np.asarray(values, np.int64)
    if values.shape[1] == 0:
        return np.zeros((len(values), 0), np.float32)
    missing = values == MISSING_TIME
    days = (np.asarray(cutoffs, np.int64)[:, None] - np.where(missing, 0, values)) / NS_PER_DAY
    return np.where(missing, 0.0, np.sign(days) * np.log1p(np.abs(days))).astype(np.float32)


def known_rows(table: Table, df: pd.DataFrame, until) -> np.ndarray:
    """Rows known by ``until`` (rows without a time always are); every row when ``until`` is None."""
    if until is None or table.time_column is None:
        return np.ones(len(df), bool)
    times = df[table.time_column]
    return (times.isna() | (times <= pd.Timestamp(until))).to_numpy()


def fit_scale(values, packed: bool = False) -> tuple[float, float]:
    """Mean and standard deviation (ddof=0) of the known (non-NaN) values: (0, 1) when none is known,
    a deviation of 1 when one is known or all are equal; NaN when a value is infinite.

    ``packed`` sums the known values packed together rather than in place, with zeros in the gaps (as
    ``np.nanmean`` and ``np.nanstd`` do): the same statistics up to the last bit, and each caller keeps
    its own so that its encoded values (and the models fitted on them) do not move.
    """
    v = np.asarray(values, dtype=np.float64)
    known = ~np.isnan(v)
    n = int(known.sum())
    if n == 0:
        return 0.0, 1.0
    x = v[known] if packed else np.where(known, v, 0.0)
    mean = x.sum() / n
    if n == 1:
        return float(mean), 1.0
    d = x - mean
    if not packed:
        d[~known] = 0.0
    std = float(np.sqrt((d * d).sum() / n))
    return float(mean), std if std != 0 else 1.0


def standardize(values: np.ndarray, scale: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """``(values - mean) / std`` (float64) with 0 where the result is missing, and that missing mask."""
    mean, std = scale
    v = (np.asarray(values, dtype=np.float64) - mean) / std
    missing = np.isnan(v)
    return np.where(missing, 0.0, v), missing


def fit_vocabulary(values: pd.Series, ties: str = "value") -> list[str]:
    """The known values as text, most frequent first, at most ``MAX_CATEGORIES`` (see ``codes``).

    ``ties="value"`` breaks ties in frequency by the text, so the vocabulary is the same whatever the
    row order; ``ties="pandas"`` leaves them in ``Series.value_counts`` order (first seen among a few
    values, unspecified among many).
    """
    if ties not in ("value", "pandas"):
        raise ValueError(f"ties must be 'value' or 'pandas', got {ties!r}")
    counts = values.dropna().astype(str).value_counts(sort=ties != "value")
    if ties == "value":
        counts = counts.sort_index().sort_values(ascending=False, kind="stable")
    return list(counts.index[:MAX_CATEGORIES])


def codes(values: pd.Series, vocabulary: list[str]) -> np.ndarray:
    """Code i + 1 for a value whose text (``str``) is the i-th of ``vocabulary``; 0 for a missing or
    unknown value (int64)."""
    values = values.astype(object)
    code = pd.Index(vocabulary, dtype=object).get_indexer(values.map(str)) + 1
    code[values.isna().to_numpy()] = 0
    return code.astype(np.int64)


# What TableEncoder makes of a column of each dtype, in brief (for `fourdb describe` and a run's log)
ENCODINGS = {"numeric": "standardized + missing flag",
             "category": f"codes by frequency (top {MAX_CATEGORIES})",
             "datetime": "month, weekday, hour, age + missing flag",
             "text": "TF-IDF + SVD"}


class TableEncoder:
    """Fitted once per table; encodes any subset of its rows the same way."""

    def __init__(self, table: Table, exclude: tuple[str, ...] = ()):
        self.table = table
        self.columns = [c for c in table.feature_columns if c.name not in exclude]
        self.stats: dict = {}

    def fit(self, df: pd.DataFrame, until=None) -> "TableEncoder":
        """Fit on the rows known by ``until`` (the start of validation), so no statistic comes from later."""
        known = known_rows(self.table, df, until)
        for col in self.columns:
            values = df[col.name][known]  # a column at a time: a 100M-row table is not copied whole
            if col.dtype == "numeric":
                self.stats[col.name] = fit_scale(values.astype("float64"))
            elif col.dtype == "category":
                self.stats[col.name] = {v: i + 1 for i, v in enumerate(fit_vocabulary(values))}
            elif col.dtype == "text":
                self.stats[col.name] = self._fit_text(values)
        return self

    @staticmethod
    def _fit_text(values: pd.Series):
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer

        docs = values.fillna("").astype(str)
        vec = TfidfVectorizer(max_features=5000, min_df=1)
        try:
            x = vec.fit_transform(docs)
        except ValueError:  # empty vocabulary: every value blank
            return None
        k = min(TEXT_DIMS, x.shape[1] - 1, x.shape[0] - 1)
        if k < 1:
            return None
        svd = TruncatedSVD(n_components=k, random_state=0).fit(x)
        return vec, svd

    def transform(self, df: pd.DataFrame, masked: set[str] | frozenset = frozenset(),
                  cutoffs: np.ndarray | None = None) -> EncodedTable:
        """Encode ``df``'s rows. With ``cutoffs`` (int64 ns per row) each datetime column's age at the
        row's cutoff joins the numeric block; without, the raw values go to ``datetimes`` for the caller
        to turn into ages per cutoff (a graph row is read at many cutoffs).

        Rows are encoded ``CHUNK_ROWS`` at a time into the output arrays, so the float64 work arrays
        of a 100M-row table never exist at once (every encoding is row by row: chunks change nothing)."""
        n = len(df)
        if n <= CHUNK_ROWS:
            return self._transform(df, masked, cutoffs)
        out = None
        for start in range(0, n, CHUNK_ROWS):
            part = self._transform(df.iloc[start:start + CHUNK_ROWS], masked,
                                   None if cutoffs is None else cutoffs[start:start + CHUNK_ROWS])
            if out is None:
                out = EncodedTable(*(np.empty((n, a.shape[1]), a.dtype) for a in
                                     (part.numeric, part.categorical)), part.cardinalities, part.numeric_names,
                                   part.categorical_names, np.empty((n, part.datetimes.shape[1]), np.int64),
                                   part.datetime_names)
            rows = slice(start, start + len(part.numeric))
            out.numeric[rows], out.categorical[rows], out.datetimes[rows] = \
                part.numeric, part.categorical, part.datetimes
        return out

    def _transform(self, df: pd.DataFrame, masked, cutoffs) -> EncodedTable:
        n = len(df)
        nums, num_names, cats, cards, cat_names, dts, dt_names = [], [], [], [], [], [], []
        for col in self.columns:
            values = df[col.name]
            hide = col.name in masked
            if col.dtype == "numeric":
                v, miss = standardize(values.astype("float64").to_numpy(), self.stats[col.name])
                if hide:
                    v, miss = np.zeros(n), np.ones(n, dtype=bool)
                nums += [v, miss.astype(float)]  # every column flagged, right after it
                num_names += [col.name, f"{col.name}:missing"]
            elif col.dtype == "category":
                vocab = self.stats[col.name]
                cats.append(np.zeros(n, dtype=np.int64) if hide else codes(values, list(vocab)))
                cards.append(len(vocab) + 1)
                cat_names.append(col.name)
            elif col.dtype == "datetime":
                dt = pd.to_datetime(values)
                miss = dt.isna().to_numpy() | hide
                parts = {
                    "month": (dt.dt.month.to_numpy(dtype=float, na_value=np.nan) - 6.5) / 3.5,
                    "weekday": (dt.dt.weekday.to_numpy(dtype=float, na_value=np.nan) - 3) / 2,
                    "hour": (dt.dt.hour.to_numpy(dtype=float, na_value=np.nan) - 11.5) / 7,
                }
                for part, v in parts.items():
                    nums.append(np.where(miss, 0.0, np.nan_to_num(v)))
                    num_names.append(f"{col.name}:{part}")
                nums.append(miss.astype(float))
                num_names.append(f"{col.name}:missing")
                dts.append(np.where(miss, MISSING_TIME, to_epoch_ns(dt)))
                dt_names.append(f"{col.name}:age")
            elif col.dtype == "text":
                fitted = self.stats[col.name]
                if fitted is None:
                    continue
                vec, svd = fitted
                z = svd.transform(vec.transform(values.fillna("").astype(str)))
                if hide:
                    z = np.zeros_like(z)
                nums += list(z.T)
                num_names += [f"{col.name}:svd{i}" for i in range(z.shape[1])]
        datetimes = np.stack(dts, 1).astype(np.int64) if dts else np.zeros((n, 0), np.int64)
        if cutoffs is not None:
            nums += list(datetime_age(datetimes, cutoffs).T)
            num_names += dt_names
            datetimes, dt_names = np.zeros((n, 0), np.int64), []
        numeric = np.stack(nums, 1).astype(np.float32) if nums else np.zeros((n, 0), np.float32)
        categorical = np.stack(cats, 1) if cats else np.zeros((n, 0), np.int64)
        return EncodedTable(numeric, categorical, cards, num_names, cat_names, datetimes, dt_names)


def encode_features(frames: dict[str, pd.DataFrame], fit_split: str = "train") -> dict[str, EncodedTable]:
    """Computed feature columns (DFS's), split by split, with statistics of ``fit_split``: numeric
    features standardized (NaN -> 0, and a missing flag only for the features missing somewhere in
    ``fit_split``, the flags after all numeric columns, float32); the other features as codes of the
    ``fit_split`` vocabulary (0 = unknown or missing; ties in frequency in ``value_counts`` order)."""
    fit = frames[fit_split]
    numeric = [c for c in fit.columns if pd.api.types.is_numeric_dtype(fit[c])]
    category = [c for c in fit.columns if c not in numeric]
    scales, flagged = {}, {}
    for c in numeric:
        v = fit[c].to_numpy(dtype=np.float64)
        mean, std = fit_scale(v, packed=True)
        # an infinity leaves no spread (NaN): scaled by 1 here, where TableEncoder lets the column read as missing
        scales[c] = (mean, std if std > 0 else 1.0)
        flagged[c] = bool(np.isnan(v).any())
    vocab = {c: fit_vocabulary(fit[c], ties="pandas") for c in category}
    out = {}
    for split, df in frames.items():
        n = len(df)
        nums, flags, flag_names = [], [], []
        for c in numeric:
            v, miss = standardize(df[c].to_numpy(dtype=np.float64), scales[c])
            nums.append(v.astype(np.float32))
            if flagged[c]:
                flags.append(miss.astype(np.float32))
                flag_names.append(f"{c}:missing")
        cats = [codes(df[c], vocab[c]) for c in category]
        cols = nums + flags
        out[split] = EncodedTable(np.stack(cols, 1) if cols else np.zeros((n, 0), np.float32),
                                  np.stack(cats, 1) if cats else np.zeros((n, 0), np.int64),
                                  [len(vocab[c]) + 1 for c in category], numeric + flag_names, list(category))
    return out
