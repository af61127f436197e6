from fourdb.rdb.database import Database, write_database
from fourdb.rdb.schema import Column, Schema, Table

__all__ = ["Column", "Database", "Schema", "Table", "write_database"]
