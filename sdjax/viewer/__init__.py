"""3-D viewer of sdjax trajectories in the browser: ``sdjax.viewer.show`` and ``sdjax view``.

```python
from sdjax import viewer
v = viewer.show(model, trajectory)             # viser prints the URL (v.url); Jupyter shows it inline
v.set_time(100); v.play(); v.close()
viewer.show(model, [planned, executed], labels=["planned", "executed"])
viewer.show(model, [nominal, batch])           # batch: vmap of a rollout, drawn as ghosts
info = sdjax.io.import_urdf("robot.urdf")      # or sdjax.io.mjcf_import.import_mjcf("robot.xml")
viewer.show(info.model, trajectory, visuals=info)   # drawn with the file's visual meshes
```

Each link is drawn as capsules along the bones of :mod:`sdjax.plotting`'s stick figure (parent
centroid -> joint -> centroid -> end points) with a radius from its mass and inertia, joints
as spheres, the base as its inertia-equivalent box (the uniform box with the base's mass and
principal moments) with its frame axes, the end points as small axes, the centre of mass as a
sphere and, optionally, the linear momentum and the angular momentum about the centre of mass
as arrows. A slider scrubs the time, a button plays it back (``speed`` simulated seconds per
second, looped). Several trajectories are drawn together, each in a colour; the members of a
batch are semi-transparent ghosts. :mod:`sdjax.viewer.geometry` computes all of it as NumPy
arrays (tested against :mod:`sdjax.kinematics` without a browser); :mod:`sdjax.viewer.server`
puts it on the screen.

Why viser (https://viser.studio, ``viser==1.1.1``): it is what the JAX robotics community uses
(mjlab's browser viewer, the examples of pyroki and jaxls, cuRobo's visualizer), it is pure ``pip`` (no system libraries, no
display: a web server whose client is a prebuilt three.js page), it works headless (on a
remote or CI machine; the browser can be anywhere), and in notebooks (the page in an iframe).
It is an optional extra: ``pip install 'sdjax[viewer]'``. ``import sdjax`` never imports it, and
this package imports it only when :func:`show` is called (an ``ImportError`` names the extra).

A robot read from a URDF or MJCF file can be drawn with the file's visual geometry (boxes,
spheres, cylinders, capsules and meshes: :mod:`sdjax.io.visuals`), ``visuals=`` of
:func:`show` (``sdjax view run.npz --model robot.urdf`` does it by itself; ``--no-meshes``
not). Each shape moves with its body; the bodies so drawn hide their capsules (a checkbox
switches back), a body whose mesh file cannot be found or read keeps them (one warning per
file), and the members of a batch stay capsules so that hundreds of ghosts remain light.
:mod:`sdjax.viewer.meshes` turns the shapes into triangles (trimesh; COLLADA through
pycollada, in the ``viewer`` extra).
"""

from sdjax.viewer.geometry import SceneGeometry as SceneGeometry
from sdjax.viewer.geometry import scene_geometries as scene_geometries
from sdjax.viewer.geometry import scene_geometry as scene_geometry
from sdjax.viewer.geometry import split_trajectories as split_trajectories
from sdjax.viewer.server import VISER_VERSION as VISER_VERSION
from sdjax.viewer.server import Viewer as Viewer
from sdjax.viewer.server import show as show

__all__ = [
    "VISER_VERSION",
    "SceneGeometry",
    "Viewer",
    "scene_geometries",
    "scene_geometry",
    "show",
    "split_trajectories",
]
