"""NICo MachineIds for the test kit (SPEC 7, issue 22).

NICo identifies hosts and DPUs by MachineId strings, never uuids:
"fm100" + the machine type (d DPU, h host, p predicted host) + the source
(t TPM, s product/board/chassis serial) + the SHA-256 hardware hash in
BASE32_DNSSEC (RFC 5155: 0-9 a-v, lowercase, no padding), 59 characters in
all (crates/uuid/src/machine/mod.rs; docs/nico-integration.md lists the
commits read). The tests make them deterministically from a seed, the way
NICo derives them from a hardware fingerprint, and check what the database
returns with the same rules NICo's parser applies when sqlx decodes a
MachineId column. Standard library only.
"""
import base64
import hashlib
import re

PREFIX = "fm100"
LENGTH = 59
TYPES = {"dpu": "d", "host": "h", "predicted_host": "p"}
SOURCES = {"tpm": "t", "serial": "s"}
_PAYLOAD = re.compile(r"[0-9a-vA-V]{51}[0gG]")


def machine_id(kind, seed, source="serial"):
    """The MachineId NICo would derive for a machine of this kind whose
    hardware fingerprint is `seed` (any string or number)."""
    digest = hashlib.sha256(f"{kind}/{seed}".encode()).digest()
    payload = base64.b32hexencode(digest).decode().rstrip("=").lower()
    assert len(payload) == 52, payload
    return PREFIX + TYPES[kind] + SOURCES[source] + payload


def dpu_machine_id(seed, source="serial"):
    return machine_id("dpu", seed, source)


def host_machine_id(seed, source="serial"):
    return machine_id("host", seed, source)


def problem(value):
    """None when NICo's MachineId parser accepts value; otherwise its reason
    (the order and words of `impl FromStr for MachineId`)."""
    if not isinstance(value, str):
        return "not a string"
    raw = value.encode()
    if len(raw) != LENGTH:
        return f"the machine ID has an invalid length of {len(raw)}"
    if not value.startswith(PREFIX):
        return "the machine ID has an invalid prefix"
    # 52 BASE32_DNSSEC characters decoding to 32 bytes: the last one carries
    # one data bit and four trailing bits that must be zero (0 or g)
    if not _PAYLOAD.fullmatch(value[7:]):
        return "the machine ID has an invalid encoding"
    if value[5] not in "dhp" or value[6] not in "ts":
        return "the machine ID has an invalid prefix"
    return None


def parse(value):
    """(canonical, kind) as NICo's parser and Display give them, or ValueError."""
    why = problem(value)
    if why:
        raise ValueError(f"{why}: {value!r}")
    kind = {v: k for k, v in TYPES.items()}[value[5]]
    return value[:7] + value[7:].lower(), kind
