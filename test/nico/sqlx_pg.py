"""A PostgreSQL connection that binds and decodes the way sqlx does (issue 22).

NICo's database layer is Rust + sqlx. sqlx sends every parameter with the
type of its Rust value, in the extended protocol, never as a literal: a
`String` (or `&str`, a MachineId, a ConfigVersion) binds as `text`, an `i64`
as `int8`, a `bool` as `bool`, a `Uuid` as `uuid`, `Json<T>` as `jsonb`, a
`Vec<String>` as `text[]`, a `Vec<Uuid>` as `uuid[]`, and `None` of an
`Option<T>` as a NULL of T's type. PostgreSQL then resolves the function by
those types: an `int8` argument does not fit an `integer` parameter, a
`text` one does not fit `uuid` (42883). Results are decoded by Rust type
too, and sqlx checks each column's type (`Type::compatible`): an `i32` reads
only `int4`, a `String` only text-like types (`text`, `varchar`, `bpchar`,
`name`, not a domain over text), and a NULL in a non-`Option` field is an
error.

This module gives psycopg 3 (Debian's python3-psycopg, for /usr/bin/python3)
exactly that: `connect()` registers dumpers so that `str` is dumped as
`text`, `int` as `int8`, `bool`, `uuid.UUID`, `Jsonb`, and the typed arrays
and NULLs below, all in binary format as sqlx sends them, with every
statement prepared (sqlx's statement cache); `query()` binds positional
parameters server-side and decodes each row against a declared Rust schema,
refusing what sqlx would refuse. Errors carry SQLSTATE and the constraint
name, which is what NICo matches (`DatabaseError::code()`,
`::constraint()`).
"""
import collections
import datetime
import json
import re
import uuid

import psycopg
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types.array import ListBinaryDumper
from psycopg.types.bool import BoolBinaryDumper
from psycopg.types.json import Jsonb, JsonbBinaryDumper
from psycopg.types.numeric import Int8BinaryDumper
from psycopg.types.string import StrBinaryDumper
from psycopg.types.uuid import UUIDBinaryDumper

from extsvc_testkit import machine_ids

OID = {name: postgres.types[name].oid for name in
       ("text", "varchar", "bpchar", "name", "int2", "int4", "int8", "bool", "uuid", "json", "jsonb",
        "timestamptz", "float8")}
ARRAY_OID = {name: postgres.types[name].array_oid for name in ("text", "varchar", "bpchar", "name", "uuid",
                                                                  "int4", "int8")}
UNKNOWN_OID = 705


# --- binds --------------------------------------------------------------------

class TextArray(list):
    """Vec<String> (or Vec<MachineId>, Vec<ConfigVersion>): text[]."""


class UuidArray(list):
    """Vec<Uuid>: uuid[]."""


class _Null:
    pg_type = None

    def __repr__(self):
        return f"NULL::{self.pg_type}"


class NullText(_Null):
    pg_type = "text"


class NullInt8(_Null):
    pg_type = "int8"


class NullBool(_Null):
    pg_type = "bool"


class NullUuid(_Null):
    pg_type = "uuid"


class NullJsonb(_Null):
    pg_type = "jsonb"


class NullTextArray(_Null):
    pg_type = "text[]"


NULL = {"text": NullText(), "int8": NullInt8(), "bool": NullBool(), "uuid": NullUuid(), "jsonb": NullJsonb(),
        "text[]": NullTextArray()}


def _null_dumper(oid):
    class NullDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj):
            return None       # a NULL of this dumper's type, as Option::<T>::None binds

    NullDumper.oid = oid
    return NullDumper


class _TextArrayDumper(ListBinaryDumper):
    oid = ARRAY_OID["text"]
    element_oid = OID["text"]


class _UuidArrayDumper(ListBinaryDumper):
    oid = ARRAY_OID["uuid"]
    element_oid = OID["uuid"]


# Rust type -> what to bind: the Python value, or the typed NULL for None.
BIND_TYPES = {"String": "text", "MachineId": "text", "ConfigVersion": "text", "i64": "int8", "bool": "bool",
              "Uuid": "uuid", "Json": "jsonb", "Vec<String>": "text[]", "Vec<MachineId>": "text[]",
              "Vec<ConfigVersion>": "text[]", "Vec<Uuid>": "uuid[]"}


def bind(rust, value):
    """The bind of a value of Rust type `rust` (Option<T>: None binds T's NULL)."""
    inner = rust[len("Option<"):-1] if rust.startswith("Option<") else rust
    pg = BIND_TYPES[inner]
    if value is None:
        if inner == rust:
            raise TypeError(f"{rust} cannot be None")
        if pg == "uuid[]":
            raise TypeError("no Option<Vec<Uuid>> in NICo's binds")
        return NULL[pg]
    if pg == "text":
        if inner == "MachineId":
            machine_ids.parse(value)      # a MachineId value can only hold a parsed id
        if not isinstance(value, str):
            raise TypeError(f"{rust}: {value!r} is not a string")
        return value
    if pg == "int8":
        if not isinstance(value, int) or isinstance(value, bool) or not -2**63 <= value < 2**63:
            raise TypeError(f"{rust}: {value!r} is not an i64")
        return value
    if pg == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{rust}: {value!r} is not a bool")
        return value
    if pg == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    if pg == "jsonb":
        return Jsonb(value)
    if pg == "text[]":
        if not all(isinstance(v, str) for v in value):
            raise TypeError(f"{rust}: every element must be a string")
        if inner == "Vec<MachineId>":
            for v in value:
                machine_ids.parse(v)
        return TextArray(value)
    if pg == "uuid[]":
        return UuidArray(v if isinstance(v, uuid.UUID) else uuid.UUID(str(v)) for v in value)
    raise TypeError(rust)


def connect(conninfo="", **kwargs):
    """A psycopg connection binding like sqlx: autocommit off (every handler
    opens its own transaction), statements prepared at first use."""
    conn = psycopg.connect(conninfo, autocommit=True, prepare_threshold=0, **kwargs)
    a = conn.adapters
    # the typed NULLs first: the dumpers registered after them are the ones
    # psycopg finds by oid (array elements)
    for cls in (NullText, NullInt8, NullBool, NullUuid, NullJsonb, NullTextArray):
        pg = cls.pg_type
        a.register_dumper(cls, _null_dumper(ARRAY_OID["text"] if pg == "text[]" else OID[pg]))
    a.register_dumper(str, StrBinaryDumper)          # String: text, not psycopg's default unknown
    a.register_dumper(int, Int8BinaryDumper)         # i64: int8, whatever the value
    a.register_dumper(bool, BoolBinaryDumper)
    a.register_dumper(uuid.UUID, UUIDBinaryDumper)
    a.register_dumper(Jsonb, JsonbBinaryDumper)
    a.register_dumper(TextArray, _TextArrayDumper)
    a.register_dumper(UuidArray, _UuidArrayDumper)
    return conn


# --- decoding -----------------------------------------------------------------

class DecodeError(Exception):
    """What sqlx's decode would return (ColumnDecode, ColumnNotFound, UnexpectedNull)."""


# Rust type -> the column types sqlx's `Type::compatible` accepts.
COMPATIBLE = {
    "String": {OID["text"], OID["varchar"], OID["bpchar"], OID["name"], UNKNOWN_OID},
    "i16": {OID["int2"]}, "i32": {OID["int4"]}, "i64": {OID["int8"]}, "bool": {OID["bool"]},
    "Uuid": {OID["uuid"]}, "DateTime<Utc>": {OID["timestamptz"]}, "Json": {OID["json"], OID["jsonb"]},
    "f64": {OID["float8"]},
    "Vec<String>": {ARRAY_OID["text"], ARRAY_OID["varchar"], ARRAY_OID["bpchar"], ARRAY_OID["name"]},
    "Vec<Uuid>": {ARRAY_OID["uuid"]}, "Vec<i32>": {ARRAY_OID["int4"]}, "Vec<i64>": {ARRAY_OID["int8"]},
}
COMPATIBLE["MachineId"] = COMPATIBLE["String"]         # sqlx::Type for MachineId: String's
COMPATIBLE["ConfigVersion"] = COMPATIBLE["String"]     # and for ConfigVersion
COMPATIBLE["Vec<MachineId>"] = COMPATIBLE["Vec<String>"]
COMPATIBLE["Vec<ConfigVersion>"] = COMPATIBLE["Vec<String>"]

CONFIG_VERSION = re.compile(r"V([0-9]+)-T([0-9]+)")


def parse_config_version(s):
    """NICo's `impl FromStr for ConfigVersion` (crates/config-version): V<u64>-T<u64 micros>,
    surrounding whitespace trimmed, exactly two '-'-separated parts. Returns (n, micros)."""
    parts = s.strip().split("-")
    if len(parts) != 2 or not parts[0].startswith("V") or not parts[1].startswith("T"):
        raise ValueError(f"invalid version format: {s}")
    # Rust's u64::from_str: ASCII digits with an optional leading '+'
    nums = []
    for p in (parts[0][1:], parts[1][1:]):
        body = p[1:] if p.startswith("+") else p
        if not body.isascii() or not body.isdigit() or int(body) >= 2**64:
            raise ValueError(f"invalid version format: {s}")
        nums.append(int(body))
    return nums[0], nums[1]


def _convert(rust, value, column):
    if rust == "MachineId":
        try:
            canonical, _ = machine_ids.parse(value)
        except ValueError as e:
            raise DecodeError(f"column {column}: MachineId decode: {e}")
        return canonical
    if rust == "Vec<MachineId>":
        return [_convert("MachineId", v, column) for v in value]
    if rust == "ConfigVersion":
        try:
            parse_config_version(value)
        except ValueError as e:
            raise DecodeError(f"column {column}: ConfigVersion decode: {e}")
        return value
    if rust == "Vec<ConfigVersion>":
        return [_convert("ConfigVersion", v, column) for v in value]
    if rust.startswith("Vec<") and any(v is None for v in value):
        raise DecodeError(f"column {column}: unexpected null in {rust}")
    return value


Field = collections.namedtuple("Field", "name type_code")


def decode_row(description, row, schema):
    """The row as a dict by the schema {column: Rust type}; the columns the
    schema does not name are not read (FromRow by name)."""
    index = {d.name: i for i, d in enumerate(description)}
    out = {}
    for column, rust in schema.items():
        if column not in index:
            raise DecodeError(f"no column found for name: {column}")
        d = description[index[column]]
        optional = rust.startswith("Option<")
        inner = rust[len("Option<"):-1] if optional else rust
        if d.type_code not in COMPATIBLE[inner]:
            raise DecodeError(f"column {column}: mismatched types; Rust type {inner} is not compatible "
                              f"with SQL type oid {d.type_code}")
        value = row[index[column]]
        if value is None:
            if not optional:
                raise DecodeError(f"column {column}: unexpected null; try decoding as an Option")
            out[column] = None
            continue
        out[column] = _convert(inner, value, column)
    return out


class DbError(Exception):
    """A database error as sqlx hands it to NICo: SQLSTATE and constraint."""

    def __init__(self, err):
        super().__init__(str(err).splitlines()[0] if str(err) else repr(err))
        self.sqlstate = err.sqlstate
        self.constraint = err.diag.constraint_name
        self.detail = err.diag.message_detail
        self.message = err.diag.message_primary
        self.context = err.diag.context

    def code(self):
        return f"{self.sqlstate} {self.constraint or '-'}"


def query(conn, sql, binds, schema=None):
    """Runs sql with binds [(Rust type, value)], server-side; returns the rows
    decoded by schema (a dict column -> Rust type), or the rows as tuples
    when schema is None. Database errors come back as DbError."""
    params = [bind(rust, value) for rust, value in binds]
    try:
        with conn.cursor(binary=True) as cur:
            cur.execute(sql, params)
            res = cur.pgresult
            if res is None or res.nfields == 0:
                return []
            rows = cur.fetchall()
            if schema is None:
                return rows
            # names and type oids straight from the result, as sqlx reads its
            # RowDescription: psycopg's cursor.description builds a Column
            # object per column at every access, a third of this client's CPU
            # per API call in bench/nico_handlers.py
            description = [Field(res.fname(i).decode(), res.ftype(i)) for i in range(res.nfields)]
            return [decode_row(description, r, schema) for r in rows]
    except psycopg.errors.DatabaseError as e:
        if e.sqlstate is None:
            raise
        raise DbError(e) from None


def scalar(conn, sql, binds, rust):
    """One row, one column decoded as `rust` (sqlx::query_scalar)."""
    rows = query(conn, sql, binds, {"v": rust})
    if len(rows) != 1:
        raise DecodeError(f"expected one row, got {len(rows)}")
    return rows[0]["v"]


def to_json(value):
    """JSON text of a decoded value (datetimes as RFC 3339, uuids as strings)."""
    def default(o):
        if isinstance(o, (datetime.datetime, datetime.date)):
            return o.isoformat()
        if isinstance(o, uuid.UUID):
            return str(o)
        raise TypeError(o)
    return json.dumps(value, default=default, sort_keys=True)
