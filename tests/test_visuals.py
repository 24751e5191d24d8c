"""Visual geometry of URDF and MJCF files (sdjax.io.visuals) and its drawing by the viewer:
poses against Pinocchio's visual model and MuJoCo's geom poses, mesh files found and scaled,
missing or malformed input, and the scene nodes of sdjax.viewer."""

import collections
import importlib.metadata
import os
import pathlib
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.io import import_urdf
from sdjax.io.visuals import VisualShape, load_visuals, resolve_mesh_path, world_poses

DATA = pathlib.Path(__file__).parent / "data"
PKG = DATA / "visual_pkg"  # a package folder: urdf/visual_arm.urdf, meshes/wedge.{stl,obj}
ARM = PKG / "urdf" / "visual_arm.urdf"
WEDGE = np.array([0.1, 0.2, 0.3])  # the wedge meshes' extent along x, y, z, m (tests/data/visual_pkg/meshes)


def _stack(states):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def _random_state(model, seed):
    rng = np.random.default_rng(seed)
    return sdjax.make_state(
        model, base_position=rng.normal(size=3), base_rpy=rng.normal(size=3), q=rng.normal(size=model.num_joints)
    )


def _quat_wxyz_to_matrix(wxyz):
    w, x, y, z = np.asarray(wxyz, np.float64) / np.linalg.norm(wxyz)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


# ------------------------------------------------------------------------------------------
# URDF.


def test_urdf_visuals_are_where_pinocchio_places_them(tmp_path):
    """Every <visual> of the test arm (a box on the base, a sphere on a sensor welded to the
    base, a cylinder and a package:// mesh on a link turning about y, a box on a tool welded to
    that link, a scaled mesh on a link sliding along -z) is, in the inertial frame at random
    states, where Pinocchio's visual model puts it (updateGeometryPlacements), with the same
    size; welded links' shapes ride on their parent body."""
    pin = pytest.importorskip("pinocchio")
    info = import_urdf(ARM)
    shapes = info.visuals
    assert [(s.link, s.body, s.kind) for s in shapes] == [
        ("base", 0, "box"), ("sensor", 0, "sphere"), ("link1", 1, "cylinder"), ("link1", 1, "mesh"), ("tool", 1, "box"), ("link2", 2, "mesh"),
    ]  # fmt: skip
    np.testing.assert_array_equal(shapes[0].rgba, [0.9, 0.7, 0.2, 1.0])  # robot-level material, by name
    np.testing.assert_array_equal(shapes[4].rgba, [0.9, 0.7, 0.2, 1.0])
    np.testing.assert_array_equal(shapes[1].rgba, [1.0, 0.0, 0.0, 0.5])  # the visual's own <color>
    assert shapes[2].rgba is None
    # Pinocchio does not resolve relative mesh paths: give it the absolute one.
    text = ARM.read_text().replace("../meshes/wedge.obj", str(PKG / "meshes" / "wedge.obj"))
    (tmp_path / "arm.urdf").write_text(text)
    pin_model = pin.buildModelFromUrdf(str(tmp_path / "arm.urdf"), pin.JointModelFreeFlyer())
    visual = pin.buildGeomFromUrdf(
        pin_model, str(tmp_path / "arm.urdf"), pin.GeometryType.VISUAL, package_dirs=[str(DATA)]
    )
    count, names = collections.Counter(), []
    for s in shapes:  # Pinocchio names a link's k-th visual "<link>_<k>"
        names.append(f"{s.link}_{count[s.link]}")
        count[s.link] += 1
    for seed in range(3):
        state = _random_state(info.model, seed)
        q, _ = sdjax.io.pinocchio_from_state(info, pin_model, state)
        data, geometry_data = pin_model.createData(), pin.GeometryData(visual)
        pin.updateGeometryPlacements(pin_model, data, visual, geometry_data, q)
        kin = sdjax.forward_kinematics(info.model, state)
        rotation, position = world_poses(shapes, kin.rotation, kin.centroid)
        for k, name in enumerate(names):
            placement = geometry_data.oMg[visual.getGeometryId(name)]
            # float64 round-off of a few chained rigid transforms of a ~1 m robot (seen: 6e-16).
            np.testing.assert_allclose(position[k], placement.translation, atol=1e-12, err_msg=name)
            np.testing.assert_allclose(rotation[k], placement.rotation, atol=1e-12, err_msg=name)
    geometries = {name: visual.geometryObjects[visual.getGeometryId(name)] for name in names}
    np.testing.assert_allclose(shapes[0].size, 2 * geometries["base_0"].geometry.halfSide, rtol=1e-15)
    assert shapes[1].size[0] == pytest.approx(geometries["sensor_0"].geometry.radius, rel=1e-15)
    cylinder = geometries["link1_0"].geometry
    np.testing.assert_allclose(shapes[2].size, [cylinder.radius, 2 * cylinder.halfLength], rtol=1e-15)
    np.testing.assert_allclose(shapes[5].size, geometries["link2_0"].meshScale, rtol=1e-15)


def test_mesh_file_names_are_resolved(tmp_path, monkeypatch):
    """package:// below the nearest folder of the package's name above the URDF, in the
    package_dirs argument, or in ROS_PACKAGE_PATH; file:// and plain paths relative to the
    URDF's folder; a missing file gives None (and loading the model goes on)."""
    stl, obj = str(PKG / "meshes" / "wedge.stl"), str(PKG / "meshes" / "wedge.obj")
    urdf_dir = PKG / "urdf"
    monkeypatch.delenv("ROS_PACKAGE_PATH", raising=False)
    assert resolve_mesh_path("package://visual_pkg/meshes/wedge.stl", urdf_dir) == stl  # walking up
    assert (
        resolve_mesh_path("package://visual_pkg/meshes/wedge.stl", None) is None
    )  # URDF text: no folder to walk up from
    assert resolve_mesh_path("package://visual_pkg/meshes/wedge.stl", None, [DATA]) == stl
    assert resolve_mesh_path("package://visual_pkg/meshes/missing.stl", urdf_dir, [DATA]) is None
    assert resolve_mesh_path("../meshes/wedge.obj", urdf_dir) == obj
    assert resolve_mesh_path("file://../meshes/wedge.obj", urdf_dir) == obj
    assert resolve_mesh_path(f"file://{obj}", None) == obj
    monkeypatch.setenv("ROS_PACKAGE_PATH", os.pathsep.join([str(tmp_path), str(DATA)]))
    assert resolve_mesh_path("package://visual_pkg/meshes/wedge.stl", None) == stl
    # Through the reader: the test arm's two meshes, and a URDF string with package_dirs.
    assert [s.mesh_file for s in import_urdf(ARM).visuals if s.kind == "mesh"] == [stl, obj]
    monkeypatch.delenv("ROS_PACKAGE_PATH")
    text = '<robot name="r"><link name="b"><inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial>' \
           '<visual><geometry><mesh filename="package://visual_pkg/meshes/wedge.stl" scale="0.5"/></geometry></visual></link></robot>'  # fmt: skip
    (shape,) = import_urdf(text, package_dirs=[DATA]).visuals
    assert shape.mesh_file == stl and shape.mesh_uri == "package://visual_pkg/meshes/wedge.stl"
    np.testing.assert_array_equal(shape.size, [0.5, 0.5, 0.5])  # one scale number: uniform


def test_mesh_scale_is_applied():
    """The drawn wedge meshes span the file's extent times the <mesh scale> (2 1 0.5 for the
    OBJ), and primitives have the sizes of the file."""
    pytest.importorskip("trimesh")
    from sdjax.viewer.meshes import shape_mesh

    meshes = {s.name: shape_mesh(s) for s in import_urdf(ARM).visuals}
    np.testing.assert_allclose(meshes["wedge_pkg"].bounds, [[0, 0, 0], WEDGE], atol=1e-7)  # STL stores float32
    np.testing.assert_allclose(meshes["wedge_rel"].bounds, [[0, 0, 0], WEDGE * [2.0, 1.0, 0.5]], atol=1e-15)
    np.testing.assert_allclose(meshes["hull"].extents, [0.6, 0.5, 0.4], rtol=1e-15)
    np.testing.assert_allclose(
        meshes["tube"].bounds, [[-0.05, -0.05, -0.2], [0.05, 0.05, 0.2]], atol=1e-15
    )  # along z, centred


def _urdf(visuals_xml: str) -> str:
    inertial = '<inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial>'
    return (
        f'<robot name="r"><link name="base">{inertial}<visual><geometry><box size="0.2 0.2 0.2"/></geometry></visual></link>'
        f'<link name="arm">{inertial}{visuals_xml}</link>'
        '<joint name="j" type="continuous"><parent link="base"/><child link="arm"/><origin xyz="0.3 0 0"/></joint></robot>'
    )


def test_missing_mesh_warns_once_and_the_body_keeps_its_capsules():
    """A mesh file that is not found: the model loads without a warning; drawing warns once
    for the file (two visuals use it) and its body is drawn as capsules."""
    pytest.importorskip("trimesh")
    from sdjax.viewer.meshes import drawn_shapes

    mesh = '<visual><geometry><mesh filename="package://nowhere/arm.dae"/></geometry></visual>'
    info = import_urdf(_urdf(mesh + mesh))  # filterwarnings = error: any warning here fails
    assert [s.resolved for s in info.visuals] == [True, False, False]
    with pytest.warns(UserWarning) as record:
        drawn, failed = drawn_shapes(info.visuals)
    assert len(record) == 1
    assert "URDF string: link 'arm' <visual> 1: mesh file 'package://nowhere/arm.dae' not found" in str(
        record[0].message
    )
    assert "body 1 ('arm') is drawn from its inertia instead" in str(record[0].message)
    assert [d.shape.body for d in drawn] == [0] and failed == {1}


@pytest.mark.parametrize(
    "xml, message",
    [
        ('<visual><geometry><box size="1 2"/></geometry></visual>', "link 'arm' <visual> 1 <box size>: expected 3 finite number(s), got '1 2'"),
        ('<visual name="v"><geometry><torus/></geometry></visual>', "link 'arm' <visual> 1 ('v') <geometry>: unknown shape <torus>"),
        ("<visual><geometry/></visual>", "link 'arm' <visual> 1 <geometry>: expected one shape element, got 0"),
        ('<visual><geometry><cylinder radius="0.1"/></geometry></visual>', "link 'arm' <visual> 1 <cylinder length>: missing"),
        ('<visual><geometry><sphere radius="-1"/></geometry></visual>', "link 'arm' <visual> 1 <sphere>: sizes must be non-negative"),
        ('<visual><origin rpy="0 x 0"/><geometry><sphere radius="1"/></geometry></visual>', "link 'arm' <visual> 1 <origin rpy>: expected 3"),
        ('<visual><geometry><mesh/></geometry></visual>', "link 'arm' <visual> 1 <mesh filename>: missing"),
        ('<visual><geometry><sphere radius="1"/></geometry><material name="m"><color rgba="2 0 0 1"/></material></visual>',
         "link 'arm' <visual> 1 <material> <color rgba>: expected values in [0, 1]"),
    ],
)  # fmt: skip
def test_malformed_visual_is_left_out_with_a_warning(xml, message):
    """The model loads; the shape is left out with a warning naming the file, link and element."""
    with pytest.warns(UserWarning, match=re.escape(f"URDF string: {message}")):
        info = import_urdf(_urdf(xml))
    assert info.model.num_joints == 1 and [s.link for s in info.visuals] == ["base"]


def test_import_urdf_computes_the_same_model_with_visuals():
    """Keeping the visuals changes nothing else: the arm's model equals that of the file
    with its <visual> elements removed."""
    text = re.sub(r"<visual.*?</visual>", "", ARM.read_text(), flags=re.S)
    bare = import_urdf(text)
    info = import_urdf(ARM)
    assert bare.visuals == ()
    for a, b in zip(jax.tree.leaves(info.model), jax.tree.leaves(bare.model)):
        np.testing.assert_array_equal(a, b)
    assert info.end_point_names == bare.end_point_names


# ------------------------------------------------------------------------------------------
# MJCF.

MJCF = """
<mujoco model="visual_mjcf">
  <asset>
    <mesh name="tet" vertex="0 0 0  0.1 0 0  0 0.2 0  0 0 0.3" scale="1 2 1"/>
    <material name="blue" rgba="0 0 1 1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="base" pos="0.1 0.2 0.3" quat="0.9 0.1 0.2 0.3">
      <freejoint/>
      <geom name="hull" type="box" size="0.3 0.2 0.1" pos="0.05 0 0" euler="10 20 30" contype="0" conaffinity="0" group="2" material="blue"/>
      <geom name="hull_mesh" type="mesh" mesh="tet" pos="0.1 0.1 0" contype="0" conaffinity="0" group="2"/>
      <geom name="hull_collision" type="box" size="0.3 0.2 0.1" group="3"/>
      <geom name="hull_proxy" type="sphere" size="0.3"/>
      <body name="arm" pos="0.3 0 0.1" euler="0 30 0">
        <joint name="j1" type="hinge" axis="0 1 1" pos="0.02 0 0" ref="0.3"/>
        <geom name="upper" type="capsule" fromto="0 0 0 0.4 0 0" size="0.04" rgba="1 0 0 1"/>
        <geom name="upper_cyl" type="cylinder" size="0.03 0.1" pos="0.2 0.05 0" euler="90 0 0"/>
        <geom name="hidden" type="sphere" size="0.01" rgba="1 1 1 0"/>
        <body name="tip" pos="0.4 0 0">
          <geom name="tip_ball" type="ellipsoid" size="0.05 0.03 0.02" pos="0.01 0 0"/>
        </body>
        <body name="fore" pos="0.4 0 0" euler="0 0 20">
          <joint name="j2" type="hinge" axis="0 0 1" pos="0.01 0 0"/>
          <joint name="j3" type="slide" axis="1 0 0" pos="0.05 0.01 0" ref="0.02"/>
          <geom name="fore_mesh" type="mesh" mesh="tet" pos="0.1 0 0" euler="0 0 45"/>
          <geom name="fore_box" type="box" size="0.1 0.02 0.02" pos="0.1 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def test_mjcf_visuals_are_where_mujoco_places_its_geoms():
    """The drawn geoms of an MJCF model (visual-only geoms where a body has them, groups 0-2,
    no plane, no invisible geom) sit where MuJoCo's mj_kinematics puts them (geom_xpos,
    geom_xmat) at random coordinates, through state_from_mujoco; the mesh's compiled vertices,
    so posed, are the authored ones (scaled, at the authored geom pose)."""
    mujoco = pytest.importorskip("mujoco")
    from sdjax.io.mjcf_import import import_mjcf, state_from_mujoco

    info = import_mjcf(MJCF)
    shapes = info.visuals
    assert [(s.name, s.body, s.kind) for s in shapes] == [
        ("hull", 0, "box"), ("hull_mesh", 0, "mesh"), ("upper", 1, "capsule"), ("upper_cyl", 1, "cylinder"), ("tip_ball", 1, "ellipsoid"),
        ("fore_mesh", 3, "mesh"), ("fore_box", 3, "box"),
    ]  # fmt: skip
    np.testing.assert_allclose(shapes[0].rgba, [0, 0, 1, 1])  # the material's colour
    np.testing.assert_allclose(shapes[2].rgba, [1, 0, 0, 1])
    np.testing.assert_allclose(shapes[0].size, [0.6, 0.4, 0.2])  # full sides from MuJoCo's half sizes
    np.testing.assert_allclose(shapes[2].size, [0.04, 0.4])  # radius, length between the sphere centres
    m = mujoco.MjModel.from_xml_string(MJCF)
    d = mujoco.MjData(m)
    ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, s.name) for s in shapes]
    for seed in range(3):
        rng = np.random.default_rng(seed)
        d.qpos[:] = m.qpos0
        d.qpos[:3], quat = rng.normal(size=3), rng.normal(size=4)
        d.qpos[3:7] = quat / np.linalg.norm(quat)
        d.qpos[7:] = rng.normal(size=m.nq - 7)
        mujoco.mj_kinematics(m, d)
        kin = sdjax.forward_kinematics(info.model, state_from_mujoco(info, m, d.qpos, d.qvel))
        rotation, position = world_poses(shapes, kin.rotation, kin.centroid)
        # float64 round-off of chained transforms (and MuJoCo's own quaternion products); seen 9e-16.
        np.testing.assert_allclose(position, d.geom_xpos[ids], atol=1e-12)
        np.testing.assert_allclose(rotation, d.geom_xmat[ids].reshape(-1, 3, 3), atol=1e-12)
        # The authored mesh: vertices scaled (1 2 1), turned 45 degrees about z, at (0.1 0 0) in body "fore".
        fore = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "fore")
        c, s = np.cos(np.pi / 4), np.sin(np.pi / 4)
        authored = np.array([[0, 0, 0], [0.1, 0, 0], [0, 0.4, 0], [0, 0, 0.3]]) @ np.array(
            [[c, -s, 0], [s, c, 0], [0, 0, 1]]
        ).T + [0.1, 0, 0]
        expected = d.xpos[fore] + authored @ d.xmat[fore].reshape(3, 3).T
        drawn = position[5] + shapes[5].vertices @ rotation[5].T
        np.testing.assert_allclose(
            np.sort(drawn, axis=0), np.sort(expected, axis=0), atol=1e-9
        )  # MuJoCo stores vertices as float32, recentred: ~1e-9 m


# ------------------------------------------------------------------------------------------
# A real robot file.


def _example_robot_data() -> pathlib.Path:
    try:
        dist = importlib.metadata.distribution("example-robot-data")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("example-robot-data is not installed (pip install example-robot-data; the bench extra has it)")
    robots = pathlib.Path(dist.locate_file("cmeel.prefix/share/example-robot-data/robots"))
    if not robots.is_dir():
        pytest.skip(f"example-robot-data has no robots folder at {robots}")
    return robots


def test_example_robot_data_ur5_meshes_are_found_and_read():
    """The UR5 of example-robot-data: every link's package:// COLLADA mesh is found (by walking
    up to the package folder) and read (with pycollada) into metres-sized triangles."""
    robots = _example_robot_data()
    info = import_urdf(robots / "ur_description" / "urdf" / "ur5_robot.urdf")
    meshes = [s for s in info.visuals if s.kind == "mesh"]
    assert len(meshes) == 7 and all(s.mesh_file and os.path.isfile(s.mesh_file) for s in meshes)
    assert sorted({s.body for s in meshes}) == list(range(info.model.num_joints + 1))
    pytest.importorskip("collada", reason="pycollada (the viewer extra) reads .dae meshes")
    from sdjax.viewer.meshes import drawn_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drawn, failed = drawn_shapes(meshes)
    assert not failed and len(drawn) == 7
    for d in drawn:
        assert len(d.mesh.faces) > 1000 and 0.05 < np.max(d.mesh.extents) < 0.6  # UR5 parts: 7 to 50 cm


# ------------------------------------------------------------------------------------------
# The viewer.


def test_show_poses_the_shapes_on_their_body_frames():
    """Each shape node, through its body-frame parent node, sits at world_poses of the sample
    shown; bodies with shapes hide their capsules, joints and base box until the meshes are
    switched off; a batch (ghosts) is drawn without shapes; the second trajectory of a list
    gets its trajectory colour."""
    pytest.importorskip("viser")
    from sdjax import viewer
    from sdjax.viewer.server import PALETTE

    info = import_urdf(ARM)
    model = info.model
    states = _stack([_random_state(model, seed) for seed in range(3)])
    batch = _stack([states, states])
    shown = viewer.show(model, [states, states, batch], visuals=info, port=0, labels=["a", "b", "c0", "c1"])
    try:
        first, second, ghost = shown._robots[0], shown._robots[1], shown._robots[2]
        assert not ghost.body_frames and np.all(ghost.bone_keep == 1)
        assert first.mesh_bodies == {0, 1, 2} and len(first.shape_nodes) == 6
        colors = [tuple(node.color) for node in second.shape_nodes]
        assert colors == [PALETTE[1]] * 6  # every shape in the second trajectory's colour
        assert tuple(first.shape_nodes[0].color) == (230, 178, 51)  # gold from the file (0.9 0.7 0.2)
        for k in (0, 2):
            shown.set_time(k)
            kin = sdjax.forward_kinematics(model, jax.tree.map(lambda x: x[k], states))
            rotation, position = world_poses(info.visuals, kin.rotation, kin.centroid)
            for j, (shape, node) in enumerate(zip(info.visuals, first.shape_nodes)):
                frame = first.body_frames[shape.body]
                parent = _quat_wxyz_to_matrix(frame.wxyz)
                # viser keeps float32 poses: 1e-6 of a metre-sized robot.
                np.testing.assert_allclose(parent @ _quat_wxyz_to_matrix(node.wxyz), rotation[j], atol=1e-6)
                np.testing.assert_allclose(frame.position + parent @ node.position, position[j], atol=1e-6)
        assert np.all(first.bone_keep == 0) and not first.box.visible
        np.testing.assert_array_equal(first.joints.batched_scales, 0.0)
        shown.set_meshes(False)
        assert (
            np.all(first.bone_keep == 1)
            and first.box.visible
            and not any(f.visible for f in first.body_frames.values())
        )
        assert np.all(first.joints.batched_scales > 0)
    finally:
        shown.close()


def test_bad_visuals_argument_names_it(sample_model):
    pytest.importorskip("viser")
    from sdjax import viewer

    states = _stack([sdjax.make_state(sample_model)] * 2)
    shape = VisualShape(7, np.eye(3), np.zeros(3), "sphere", np.array([0.1]), source="x.urdf: link 'l' <visual> 1")
    for visuals, message, error in [
        ([shape], "visuals[0].body: 7, but the model has bodies 0 to 6 (x.urdf: link 'l' <visual> 1)", ValueError),
        ([shape, "box"], "visuals[0].body: 7", ValueError),
        (["box"], "visuals[0]: expected a sdjax.io.visuals.VisualShape, got str", TypeError),
        (3, "visuals: expected a sequence of sdjax.io.visuals.VisualShape or an import result", TypeError),
    ]:
        with pytest.raises(error, match=re.escape(message)):
            viewer.show(sample_model, states, visuals=visuals, port=0)


def test_view_command_draws_the_model_files_visuals(tmp_path, monkeypatch, capsys):
    """sdjax view run.npz --model arm.urdf draws the file's shapes (--no-meshes: none); the
    server is stopped at once (wait raises KeyboardInterrupt, as Ctrl-C does)."""
    pytest.importorskip("viser")
    from sdjax import cli, viewer
    from sdjax.simulation import SimulationRun

    model = import_urdf(ARM).model
    states = _stack([_random_state(model, seed) for seed in range(2)])
    run = tmp_path / "arm.npz"
    controls = jax.tree.map(lambda x: x[None], sdjax.make_controls(model))  # one step
    SimulationRun(model, sdjax.Trajectory(jnp.array([0.0, 0.1]), states, controls)).save(run)
    seen = []

    def stop(self):
        seen.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(viewer.Viewer, "wait", stop)
    assert cli.main(["view", str(run), "--model", str(ARM), "--no-browser", "--port", "0"]) == 0
    assert "6 of 6 visual shapes drawn" in capsys.readouterr().out
    assert len(seen[0]._robots[0].shape_nodes) == 6
    assert cli.main(["view", str(run), "--model", str(ARM), "--no-browser", "--port", "0", "--no-meshes"]) == 0
    assert "visual shapes" not in capsys.readouterr().out and not seen[1]._robots[0].shape_nodes
    assert cli.main(["view", str(run), "--package-dir", str(DATA), "--no-browser"]) == 2
    assert "--package-dir locates the meshes of a URDF --model" in capsys.readouterr().err
    assert load_visuals(DATA / "spacedyn_sample.def") == ()  # a file without visual geometry


@pytest.mark.slow  # ~8 s of software WebGL on a 2-core machine: run with -m slow
def test_shapes_are_drawn_in_a_real_browser():
    """Headless Chromium draws the test arm's shapes: the gold hull (the file's material) at the
    projection of its centre, the cylinder without a material in the trajectory's blue."""
    pytest.importorskip("viser")
    from test_viewer import CHROMIUM, _projector

    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium); the browser test needs it")
    import io
    import time

    from PIL import Image
    from playwright.sync_api import sync_playwright

    from sdjax import viewer

    info = import_urdf(ARM)
    state = sdjax.make_state(info.model, q=[0.6, 0.1])
    shown = viewer.show(info.model, _stack([state, state]), visuals=info, port=0)
    try:
        shown.server.gui.main_panel.minimize()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--use-angle=swiftshader", "--enable-unsafe-swiftshader"]
            )
            try:
                page = browser.new_page(viewport={"width": 800, "height": 700})
                page.goto(shown.url)
                start, previous, shot = time.monotonic(), None, None
                while time.monotonic() - start < 60:  # until two screenshots 0.3 s apart agree, with the robot on them
                    time.sleep(0.3)
                    shot = np.asarray(Image.open(io.BytesIO(page.screenshot())).convert("RGB")).astype(np.int32)
                    if (
                        previous is not None
                        and np.array_equal(shot, previous)
                        and shown.server.get_clients()
                        and np.any(shot.max(axis=-1) < 200)
                    ):
                        break
                    previous = shot
                project = _projector(next(iter(shown.server.get_clients().values())).camera)
                kin = sdjax.forward_kinematics(info.model, state)
                _, position = world_poses(info.visuals, kin.rotation, kin.centroid)
                Image.fromarray(shot.astype(np.uint8)).save(
                    pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / "sdjax_visuals.png"
                )  # for a look when it fails
                x, y = np.round(project(position[[0, 2]])).astype(int)
                hull, tube = shot[x[1], x[0]], shot[y[1], y[0]]
                assert hull[0] > hull[2] + 60 and hull[1] > hull[2] + 30, hull  # lit gold: red > green > blue
                assert tube[2] > tube[0] + 40, tube  # lit blue
            finally:
                browser.close()
    finally:
        shown.close()
