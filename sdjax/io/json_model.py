"""JSON model files (format ``sdjax-model``, version 2; version 1 is read too).

A file holds one object::

    {
      "format": "sdjax-model", "version": 2,
      "name": "my_robot",
      "gravity": [0, 0, 0],                          # optional, m/s^2, inertial frame
      "base": {"mass": 100.0,                        # kg
               "inertia": [[10, 0, 0], [0, 10, 0], [0, 0, 10]],    # kg m^2, base frame
               "mode": "floating"},                  # optional; or "planar", "fixed" (sdjax.BASE_MODES)
      "links": [                                     # in order: link 1, 2, ..., n
        {"name": "shoulder",                         # unique
         "parent": 0,                                # 0 = base, else a lower link index
         "joint_type": "R",                          # "R" revolute, "P" prismatic
         "mass": 10.0,
         "inertia": [[1, 0, 0], [0, 1, 0], [0, 0, 0.1]],     # about the centroid, link frame
         "parent_centroid_to_joint": [0, 1, 0],      # m, parent frame (SpaceDyn c0 / cc(:,B_i,i))
         "centroid_to_joint": [0, 0, -0.5],          # m, link frame (SpaceDyn cc(:,i,i))
         "joint_rpy": [-1.5707963267948966, 0, 0],   # rad, SpaceDyn RPY (Rx Ry Rz), optional
         "joint_stiffness": 0.0, "joint_damping": 0.0,       # optional
         "mimic": {"joint": 2, "multiplier": -1.0, "offset": 0.0}   # optional: a mimic joint
        }                                            # (q = multiplier * q_joint + offset; Model.mimic_leader)
      ],
      "inertia_check": "physical",                   # optional; or "positive_definite" (SpaceDyn's rule)
      "end_points": [                                # optional: named frames, any number per body
        {"name": "tool",                             # unique
         "body": 1,                                  # 0 = base, 1..n = links
         "centroid_to_end_point": [0, 0.5, 0],       # m, from the body's centroid, body frame
         "rpy": [0, 0, 1.5707963267948966]}          # optional, rad: frame relative to the body frame
      ]
    }

Version 1 files (written by sdjax 0.1) held at most one end point per link, as a per-link
``"end_point": {"centroid_to_end_point": ..., "rpy": ...}`` (or null); they are read with end
points named ``end_point1``, ``end_point2``, ... in link order.

Numbers are written with Python's shortest round-trip representation, so
``load_json_model(save_json_model(m))`` reproduces every float64 value exactly. Unknown keys,
non-finite numbers, wrong shapes and oversized files are refused with a message naming the
JSON path. Loading never executes anything from the file.
"""

from __future__ import annotations

import json
import os
import reprlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from sdjax.io.inputs import names_the_file, parse_json, read_text_file, real_numbers
from sdjax.io.spacedyn_arrays import model_from_lp
from sdjax.model import Model

__all__ = ["load_json_model", "model_from_dict", "model_to_dict", "save_json_model"]

FORMAT = "sdjax-model"
VERSION = 2
#: Versions this reader accepts.
READS_VERSIONS = (1, 2)
#: Largest accepted file (bytes) and number of links, checked before parsing/allocating.
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_LINKS = 10_000
#: Largest number of end points, checked before allocating.
MAX_END_POINTS = 10_000

_TOP_KEYS = {"format", "version", "name", "gravity", "base", "links", "end_points", "inertia_check", "description"}
_BASE_KEYS = {"mass", "inertia", "mode"}
_LINK_KEYS = {
    "name",
    "parent",
    "joint_type",
    "mass",
    "inertia",
    "parent_centroid_to_joint",
    "centroid_to_joint",
    "joint_rpy",
    "joint_stiffness",
    "joint_damping",
    "mimic",
}
_MIMIC_KEYS = {"joint", "multiplier", "offset"}
_END_KEYS_V1 = {"centroid_to_end_point", "rpy"}
_END_KEYS = {"name", "body", "centroid_to_end_point", "rpy"}


def _floats(value: ArrayLike) -> Any:
    return np.asarray(value, dtype=np.float64).tolist()


def model_to_dict(model: Model) -> dict[str, Any]:
    """The JSON-ready description of a model (see the module docstring)."""
    links = []
    for k in range(model.num_joints):
        entry: dict[str, Any] = {
            "name": model.link_names[k],
            "parent": model.parent[k],
            "joint_type": model.joint_type[k],
            "mass": float(model.link_mass[k]),
            "inertia": _floats(model.link_inertia[k]),
            "parent_centroid_to_joint": _floats(model.parent_centroid_to_joint[k]),
            "centroid_to_joint": _floats(model.centroid_to_joint[k]),
            "joint_rpy": _floats(model.joint_rpy[k]),
            "joint_stiffness": float(model.joint_stiffness[k]),
            "joint_damping": float(model.joint_damping[k]),
        }
        if model.mimic_leader[k]:
            entry["mimic"] = {
                "joint": model.mimic_leader[k],
                "multiplier": float(model.mimic_multiplier[k]),
                "offset": float(model.mimic_offset[k]),
            }
        links.append(entry)
    end_points = [
        {
            "name": model.end_point_names[e],
            "body": body,
            "centroid_to_end_point": _floats(model.centroid_to_end_point[e]),
            "rpy": _floats(model.end_point_rpy[e]),
        }
        for e, body in enumerate(model.end_point_link)
    ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": model.name,
        "gravity": _floats(model.gravity),
        "base": {"mass": float(model.base_mass), "inertia": _floats(model.base_inertia), "mode": model.base},
        "links": links,
        "end_points": end_points,
        "inertia_check": model.inertia_check,
    }


def _check_keys(where: str, obj: Any, allowed: set[str], required: set[str]) -> None:
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(obj))
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")


def _name(where: str, obj: Mapping[str, Any], default: str) -> str:
    """``obj["name"]`` (a string), or ``default`` when it is not given."""
    value = obj.get("name", default)
    if not isinstance(value, str):
        raise ValueError(f"{where}.name: expected a string, got {type(value).__name__} {value!r}")
    return value


def _has_bool(value: Any) -> bool:
    """Whether a JSON value (numbers or nested lists of them) holds ``true``/``false``."""
    if isinstance(value, bool):
        return True
    return isinstance(value, list) and any(_has_bool(v) for v in value)


def _number_array(where: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    if _has_bool(value):  # (NumPy reads true as 1.0)
        raise ValueError(f"{where}: expected numbers of shape {shape}, got {value!r}")
    try:
        arr = real_numbers(value)
    except ValueError as err:
        raise ValueError(f"{where}: expected numbers of shape {shape}, got {reprlib.repr(value)} ({err})") from None
    if arr.shape != shape:
        raise ValueError(f"{where}: expected shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{where}: values must be finite, got {arr.tolist()}")
    return arr


def model_from_dict(data: Mapping[str, Any], dtype: Any = None) -> Model:
    """Build a model from its JSON description (see the module docstring)."""
    _check_keys("model", data, _TOP_KEYS, {"format", "version", "base", "links"})
    if data["format"] != FORMAT:
        raise ValueError(f"model.format: expected {FORMAT!r}, got {data['format']!r}")
    version = data["version"]
    if isinstance(version, bool) or version not in READS_VERSIONS:
        raise ValueError(f"model.version: this sdjax reads versions {list(READS_VERSIONS)}, got {version!r}")
    base = data["base"]
    _check_keys("model.base", base, _BASE_KEYS, {"mass", "inertia"})
    links = data["links"]
    if not isinstance(links, list):
        raise ValueError(f"model.links: expected a list, got {type(links).__name__}")
    if len(links) > MAX_LINKS:
        raise ValueError(f"model.links: {len(links)} links exceeds the limit of {MAX_LINKS}")
    n = len(links)
    fields: dict[str, list] = {k: [] for k in ("mass", "inertia", "pcj", "cj", "rpy", "k", "d", "mm", "mo")}
    mimic_leader = []
    parent, joint_type, names, end_links, end_names, end_offset, end_rpy = [], [], [], [], [], [], []
    link_keys = _LINK_KEYS | ({"end_point"} if version == 1 else set())
    for k, link in enumerate(links):
        where = f"model.links[{k}]"
        _check_keys(
            where,
            link,
            link_keys,
            {"parent", "joint_type", "mass", "inertia", "parent_centroid_to_joint", "centroid_to_joint"},
        )
        p = link["parent"]
        if isinstance(p, bool) or not isinstance(p, int):
            raise ValueError(f"{where}.parent: expected an integer body index (0 = base), got {p!r}")
        parent.append(p)
        joint_type.append(link["joint_type"])
        names.append(_name(f"model.links[{k}]", link, f"link{k + 1}"))
        fields["mass"].append(_number_array(f"{where}.mass", link["mass"], ()))
        fields["inertia"].append(_number_array(f"{where}.inertia", link["inertia"], (3, 3)))
        fields["pcj"].append(_number_array(f"{where}.parent_centroid_to_joint", link["parent_centroid_to_joint"], (3,)))
        fields["cj"].append(_number_array(f"{where}.centroid_to_joint", link["centroid_to_joint"], (3,)))
        fields["rpy"].append(_number_array(f"{where}.joint_rpy", link.get("joint_rpy", [0, 0, 0]), (3,)))
        fields["k"].append(_number_array(f"{where}.joint_stiffness", link.get("joint_stiffness", 0.0), ()))
        fields["d"].append(_number_array(f"{where}.joint_damping", link.get("joint_damping", 0.0), ()))
        mimic = link.get("mimic", {"joint": 0, "multiplier": 1.0, "offset": 0.0})
        _check_keys(f"{where}.mimic", mimic, _MIMIC_KEYS, {"joint"})
        leader = mimic["joint"]
        if isinstance(leader, bool) or not isinstance(leader, int):
            raise ValueError(f"{where}.mimic.joint: expected the index (1..n) of the joint it mimics, got {leader!r}")
        mimic_leader.append(leader)
        fields["mm"].append(_number_array(f"{where}.mimic.multiplier", mimic.get("multiplier", 1.0), ()))
        fields["mo"].append(_number_array(f"{where}.mimic.offset", mimic.get("offset", 0.0), ()))
        end = link.get("end_point")
        if end is not None:
            _check_keys(f"{where}.end_point", end, _END_KEYS_V1, {"centroid_to_end_point"})
            end_links.append(k + 1)
            end_names.append(f"end_point{len(end_links)}")
            end_offset.append(
                _number_array(f"{where}.end_point.centroid_to_end_point", end["centroid_to_end_point"], (3,))
            )
            end_rpy.append(_number_array(f"{where}.end_point.rpy", end.get("rpy", [0, 0, 0]), (3,)))

    if "end_points" in data and version == 1:
        raise ValueError(
            "model.end_points: version 1 files give end points per link (links[k].end_point); use version 2"
        )
    ends = data.get("end_points", [])
    if not isinstance(ends, list):
        raise ValueError(f"model.end_points: expected a list, got {type(ends).__name__}")
    if len(ends) > MAX_END_POINTS:
        raise ValueError(f"model.end_points: {len(ends)} end points exceeds the limit of {MAX_END_POINTS}")
    for e, end in enumerate(ends):
        where = f"model.end_points[{e}]"
        _check_keys(where, end, _END_KEYS, {"name", "body", "centroid_to_end_point"})
        body = end["body"]
        if isinstance(body, bool) or not isinstance(body, int) or not 0 <= body <= n:
            raise ValueError(f"{where}.body: expected a body index 0..{n} (0 = base), got {body!r}")
        if not isinstance(end["name"], str):
            raise ValueError(f"{where}.name: expected a string, got {end['name']!r}")
        end_links.append(body)
        end_names.append(end["name"])
        end_offset.append(_number_array(f"{where}.centroid_to_end_point", end["centroid_to_end_point"], (3,)))
        end_rpy.append(_number_array(f"{where}.rpy", end.get("rpy", [0, 0, 0]), (3,)))

    def stack(values: list, shape: tuple[int, ...]) -> np.ndarray:
        return np.array(values, dtype=np.float64).reshape(shape)

    return Model(
        parent=tuple(parent),
        joint_type=tuple(joint_type),
        base_mass=_number_array("model.base.mass", base["mass"], ()),
        base_inertia=_number_array("model.base.inertia", base["inertia"], (3, 3)),
        link_mass=stack(fields["mass"], (n,)),
        link_inertia=stack(fields["inertia"], (n, 3, 3)),
        parent_centroid_to_joint=stack(fields["pcj"], (n, 3)),
        centroid_to_joint=stack(fields["cj"], (n, 3)),
        joint_rpy=stack(fields["rpy"], (n, 3)),
        end_point_link=tuple(end_links),
        centroid_to_end_point=stack(end_offset, (len(end_links), 3)),
        end_point_rpy=stack(end_rpy, (len(end_links), 3)),
        joint_stiffness=stack(fields["k"], (n,)),
        joint_damping=stack(fields["d"], (n,)),
        gravity=_number_array("model.gravity", data.get("gravity", [0, 0, 0]), (3,)),
        link_names=tuple(names),
        end_point_names=tuple(end_names),
        name=_name("model", data, "model"),
        dtype=dtype,
        inertia_check=data.get("inertia_check", "physical"),
        base=base.get("mode", "floating"),
        mimic_leader=tuple(mimic_leader),
        mimic_multiplier=stack(fields["mm"], (n,)),
        mimic_offset=stack(fields["mo"], (n,)),
    )


def save_json_model(model: Model, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` as an ``sdjax-model`` JSON file."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(model_to_dict(model), f, indent=1)
        f.write("\n")


@names_the_file
def load_json_model(path: str | os.PathLike, dtype: Any = None) -> Model:
    """Read a JSON model file: an ``sdjax-model`` file, or SpaceDyn link parameters (the ``LP``
    struct as MATLAB's ``jsonencode`` writes it: an object with ``BB``, ``J_type``, ``c0``,
    ``cc``, ``ce``, ``Qi``, ``Qe``, ``SE``, ``m0``, ``m``, ``inertia0``, ``inertia``; read by
    :func:`sdjax.io.spacedyn_arrays.model_from_lp`, inertia accepted as SpaceDyn accepts it).

    Raises:
        ValueError: naming the file and the JSON path (or LP field) of bad content.
    """
    text = read_text_file(path, "JSON model", MAX_FILE_BYTES)
    try:
        data = parse_json(text, constants=False)
    except ValueError as err:
        raise ValueError(f"{os.fspath(path)}: {err}") from None
    if isinstance(data, Mapping) and "format" not in data and "BB" in data:
        name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
        return model_from_lp(data, name=name, dtype=dtype)
    return model_from_dict(data, dtype=dtype)
