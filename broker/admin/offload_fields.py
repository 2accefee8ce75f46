"""A namespace's or topic's offload settings as Pulsar's ``OffloadPoliciesImpl`` holds them.

Theory of operation: the document is kept whole, with Pulsar's defaults filled in and its
fields in Pulsar's order (:func:`offload_fields`). Before Pulsar kept the thresholds inside
that document, its namespace ``Policies`` had three fields of their own, still read and
written by a create body: ``offload_threshold`` and ``offload_threshold_in_seconds`` (``-1``
unset) and ``offload_deletion_lag_ms`` (``null`` unset). :data:`LEGACY` maps each to the
document field that replaced it. A create body's values are kept under those names; the
threshold and lag getters read them while the document has no value of its own, and setting
the document takes them into it and drops them, as Pulsar's
``mergeOffloadThresholdsForCompatibility`` does. Nothing here has an effect: Horae has no
tiered storage.
"""

from __future__ import annotations

from typing import Any

from broker.admin import errors as E

__all__ = ["LEGACY", "NS_OFFLOAD", "OFFLOAD_DRIVERS", "S3_DRIVERS", "THRESHOLD_S", "legacy_of_create",
           "merge_legacy", "offload_defaults", "offload_fields", "ordered"]

#: the namespace field of the document (Pulsar's Policies name)
NS_OFFLOAD = "offload_policies"

#: OffloadPoliciesImpl's fields: name -> (JSON type, default; None = left out when unset)
_OFFLOAD_FIELDS: dict[str, tuple[type, Any]] = {
    "offloadersDirectory": (str, "./offloaders"),
    "managedLedgerOffloadDriver": (str, None),
    "managedLedgerOffloadMaxThreads": (int, 2),
    "managedLedgerOffloadReadThreads": (int, None),
    "managedLedgerOffloadPrefetchRounds": (int, 1),
    "managedLedgerOffloadThresholdInSeconds": (int, None),
    "managedLedgerOffloadThresholdInBytes": (int, None),
    "managedLedgerOffloadDeletionLagInMillis": (int, None),
    "managedLedgerOffloadedReadPriority": (str, None),
    "managedLedgerExtraConfigurations": (dict, {}),
    "s3ManagedLedgerOffloadRegion": (str, None),
    "s3ManagedLedgerOffloadBucket": (str, None),
    "s3ManagedLedgerOffloadServiceEndpoint": (str, None),
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes": (int, 67108864),
    "s3ManagedLedgerOffloadReadBufferSizeInBytes": (int, 1048576),
    "s3ManagedLedgerOffloadCredentialId": (str, None),
    "s3ManagedLedgerOffloadCredentialSecret": (str, None),
    "s3ManagedLedgerOffloadRole": (str, None),
    "s3ManagedLedgerOffloadRoleSessionName": (str, "pulsar-s3-offload"),
    "gcsManagedLedgerOffloadRegion": (str, None),
    "gcsManagedLedgerOffloadBucket": (str, None),
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes": (int, 134217728),
    "gcsManagedLedgerOffloadReadBufferSizeInBytes": (int, 1048576),
    "gcsManagedLedgerOffloadServiceAccountKeyFile": (str, None),
    "fileSystemProfilePath": (str, None),
    "fileSystemURI": (str, None),
    "managedLedgerOffloadBucket": (str, None),
    "managedLedgerOffloadRegion": (str, None),
    "managedLedgerOffloadServiceEndpoint": (str, None),
    "managedLedgerOffloadMaxBlockSizeInBytes": (int, None),
    "managedLedgerOffloadReadBufferSizeInBytes": (int, None),
}
OFFLOAD_DRIVERS = ("S3", "aws-s3", "google-cloud-storage", "filesystem", "azureblob",
                   "aliyun-oss")
S3_DRIVERS = ("s3", "aws-s3")
THRESHOLD_S = "managedLedgerOffloadThresholdInSeconds"

#: Policies' own offload field (also the namespace record's name) -> (document field, unset)
LEGACY: dict[str, tuple[str, int | None]] = {
    "offload_threshold": ("managedLedgerOffloadThresholdInBytes", -1),
    "offload_threshold_in_seconds": (THRESHOLD_S, -1),
    "offload_deletion_lag_ms": ("managedLedgerOffloadDeletionLagInMillis", None),
}


def offload_defaults() -> dict[str, Any]:
    return {name: (dict(default) if isinstance(default, dict) else default)
            for name, (_, default) in _OFFLOAD_FIELDS.items() if default is not None}


def offload_fields(body: object) -> dict[str, Any]:
    """The known OffloadPolicies fields of *body* over the defaults (unknown ones dropped)."""
    if not isinstance(body, dict):
        raise E.bad_request("Invalid value: expected an OffloadPolicies")
    out = offload_defaults()
    for name, (kind, _) in _OFFLOAD_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        if (kind is int and (isinstance(value, bool) or not isinstance(value, int))) or \
                (kind is not int and not isinstance(value, kind)):
            raise E.bad_request(f"Invalid value: {name}")
        out[name] = value
    return ordered(out)


def ordered(doc: dict[str, Any]) -> dict[str, Any]:
    """*doc* with its fields in OffloadPoliciesImpl's order, as Pulsar writes them."""
    return {name: doc[name] for name in _OFFLOAD_FIELDS if name in doc}


def legacy_of_create(policies: dict[str, Any]) -> dict[str, int]:
    """The old offload fields a create body sets (their unset values left out; 400 for a
    value that is not a number, as Pulsar's JSON binding)."""
    out: dict[str, int] = {}
    for key, (_, unset) in LEGACY.items():
        value = policies.get(key)
        if value is None or value == unset:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise E.bad_request(f"Invalid value: {key} must be a number")
        out[key] = value
    return out


def merge_legacy(doc: dict[str, Any], legacy: dict[str, Any]) -> dict[str, Any]:
    """*doc* with the old fields' values where it has none of its own."""
    merged = dict(doc)
    for key, value in legacy.items():
        name = LEGACY[key][0]
        if merged.get(name) is None:
            merged[name] = value
    return ordered(merged)
