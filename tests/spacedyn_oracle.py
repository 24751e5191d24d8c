"""A plain NumPy oracle of the SpaceDyn equations (seed 000, chapter 3), written loop by loop.

It works on SpaceDyn LP arrays (MATLAB layouts, see sdjax.io.spacedyn_arrays) and follows
the equations literally: direction cosines C1, C2, C3 (eq 3.1), the velocity and
acceleration recursions (eqs 3.8-3.15), Jacobians (3.25-3.26), the inertia matrix as sums of
Jacobian products (3.19-3.28), Newton-Euler with moments about each joint (3.30-3.39), and
forward dynamics by a dense solve (3.29). It shares no code with sdjax, whose algorithms
use spatial vectors about the base centroid and composite bodies instead.
"""

from __future__ import annotations

import numpy as np

EZ = np.array([0.0, 0.0, 1.0])


def tilde(a):
    return np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])


def C1(t):  # direction cosine (passive) about x
    c, s = np.cos(t), np.sin(t)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, s], [0.0, -s, c]])


def C2(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])


def C3(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])


class SpaceDynOracle:
    """SpaceDyn's equations for one LP (dict of MATLAB-layout arrays) and gravity."""

    def __init__(self, lp, gravity=None):
        self.BB = [int(b) for b in np.asarray(lp["BB"]).reshape(-1)]
        self.n = len(self.BB)
        self.J = list(lp["J_type"])
        self.c0 = np.asarray(lp["c0"], float)
        self.cc = np.asarray(lp["cc"], float)
        self.ce = np.asarray(lp["ce"], float)
        self.Qi = np.asarray(lp["Qi"], float)
        self.Qe = np.asarray(lp["Qe"], float)
        self.SE = [int(s) for s in np.asarray(lp["SE"]).reshape(-1)]
        self.m0 = float(lp["m0"])
        self.m = np.asarray(lp["m"], float).reshape(-1)
        self.I0 = np.asarray(lp["inertia0"], float)
        inertia = np.asarray(lp["inertia"], float)
        self.I = [inertia[:, 3 * i : 3 * i + 3] for i in range(self.n)]
        self.g = np.zeros(3) if gravity is None else np.asarray(gravity, float)
        # S (3.1 item 3): S[i, j] = 1 if i = B_j, -1 if i = j.
        self.S = -np.eye(self.n)
        for j, b in enumerate(self.BB):
            if b > 0:
                self.S[b - 1, j] = 1.0
        self.S0 = [1 if b == 0 else 0 for b in self.BB]
        self.mass = self.m0 + self.m.sum()

    # -------------------------------------------------------------------- kinematics
    def rotations(self, A0, q):
        """A_i = A_{B_i} [C3(q) C3(gamma) C2(beta) C1(alpha)]^T (eq 3.1)."""
        AA = []
        for i in range(self.n):
            a, b, g = self.Qi[:, i]
            qi = q[i] if self.J[i] == "R" else 0.0
            local = (C3(qi) @ C3(g) @ C2(b) @ C1(a)).T
            parent = A0 if self.BB[i] == 0 else AA[self.BB[i] - 1]
            AA.append(parent @ local)
        return AA

    def _parent_to_joint(self, i, R0, A0, AA, RR):
        """Position of joint i (slider origin for P): r_{B_i} + A_{B_i} c_{B_i, i}."""
        b = self.BB[i]
        if b == 0:
            return R0 + A0 @ self.c0[:, i]
        return RR[b - 1] + AA[b - 1] @ self.cc[:, b - 1, i]

    def positions(self, R0, A0, AA, q):
        """Centroids r_i; joint positions p_i."""
        RR, PP = [], []
        for i in range(self.n):
            p = self._parent_to_joint(i, R0, A0, AA, RR)
            slide = AA[i] @ EZ * q[i] if self.J[i] == "P" else np.zeros(3)
            RR.append(p + slide - AA[i] @ self.cc[:, i, i])
            PP.append(p)
        return RR, PP

    def end_points(self, AA, RR):
        """(position, orientation) of each end point, in link order."""
        out = []
        for i in range(self.n):
            if self.SE[i]:
                a, b, g = self.Qe[:, i]
                out.append((RR[i] + AA[i] @ self.ce[:, i], AA[i] @ (C3(g) @ C2(b) @ C1(a)).T))
        return out

    def _lever_from_parent(self, i, A0, AA):
        b = self.BB[i]
        return A0 @ self.c0[:, i] if b == 0 else AA[b - 1] @ self.cc[:, b - 1, i]

    def velocities(self, A0, AA, q, v0, w0, qd):
        """Eqs 3.8-3.9 (revolute) and 3.12-3.13 (prismatic)."""
        vv, ww = [], []
        for i in range(self.n):
            b = self.BB[i]
            vb, wb = (v0, w0) if b == 0 else (vv[b - 1], ww[b - 1])
            k = AA[i] @ EZ
            cii = AA[i] @ self.cc[:, i, i]
            if self.J[i] == "R":
                w = wb + k * qd[i]
                v = vb + np.cross(wb, self._lever_from_parent(i, A0, AA)) - np.cross(w, cii)
            else:
                w = wb
                v = (
                    vb
                    + np.cross(wb, self._lever_from_parent(i, A0, AA))
                    - np.cross(w, cii)
                    + np.cross(w, k * q[i])
                    + k * qd[i]
                )
            vv.append(v)
            ww.append(w)
        return vv, ww

    def accelerations(self, A0, AA, q, w0, ww, vd0, wd0, qd, qdd):
        """Eqs 3.10-3.11 (revolute) and 3.14-3.15 (prismatic)."""
        vd, wd = [], []
        for i in range(self.n):
            b = self.BB[i]
            wb, wdb, vdb = (w0, wd0, vd0) if b == 0 else (ww[b - 1], wd[b - 1], vd[b - 1])
            cbi = self._lever_from_parent(i, A0, AA)
            cii = AA[i] @ self.cc[:, i, i]
            k = AA[i] @ EZ
            w = ww[i]
            common = vdb + np.cross(wdb, cbi) + np.cross(wb, np.cross(wb, cbi))
            if self.J[i] == "R":
                wdi = wdb + np.cross(w, k * qd[i]) + k * qdd[i]
                vdi = common - np.cross(wdi, cii) - np.cross(w, np.cross(w, cii))
            else:
                wdi = wdb
                phi = k * q[i]
                vdi = (
                    common
                    - np.cross(wdi, cii)
                    - np.cross(w, np.cross(w, cii))
                    + np.cross(wdi, phi)
                    + np.cross(w, np.cross(w, phi))
                    + 2.0 * np.cross(w, k * qd[i])
                    + k * qdd[i]
                )
            vd.append(vdi)
            wd.append(wdi)
        return vd, wd

    def path(self, i):
        """Joints (0-based) from the base to link i (0-based), base first."""
        out = [i]
        while self.BB[out[0]] > 0:
            out.insert(0, self.BB[out[0]] - 1)
        return out

    def point_jacobian_joints(self, AA, PP, link, point):
        """[J_T; J_R] (6, n) of a point on link (0-based) w.r.t. qd (eqs 3.25-3.26)."""
        J = np.zeros((6, self.n))
        for j in self.path(link):
            k = AA[j] @ EZ
            if self.J[j] == "R":
                J[:3, j] = np.cross(k, point - PP[j])
                J[3:, j] = k
            else:
                J[:3, j] = k
        return J

    # -------------------------------------------------------------------- dynamics
    def inertia_matrix(self, R0, A0, AA, RR, PP):
        """Eqs 3.19-3.28, Jacobian products."""
        n = self.n
        rg = (self.m0 * R0 + sum(self.m[i] * RR[i] for i in range(n))) / self.mass
        r0g = rg - R0
        Hw = A0 @ self.I0 @ A0.T
        Hwq = np.zeros((3, n))
        Hm = np.zeros((n, n))
        JTw = np.zeros((3, n))
        for i in range(n):
            J = self.point_jacobian_joints(AA, PP, i, RR[i])
            JT, JR = J[:3], J[3:]
            Ii = AA[i] @ self.I[i] @ AA[i].T
            r0i = RR[i] - R0
            Hw += Ii + self.m[i] * tilde(r0i).T @ tilde(r0i)
            Hwq += Ii @ JR + self.m[i] * tilde(r0i) @ JT
            Hm += JR.T @ Ii @ JR + self.m[i] * JT.T @ JT
            JTw += self.m[i] * JT / self.mass
        w = self.mass
        Hb = np.block([[w * np.eye(3), w * tilde(r0g).T], [w * tilde(r0g), Hw]])
        Hbm = np.vstack([w * JTw, Hwq])  # eq 3.20 with J_Tw scaled back by w (3.24)
        return np.block([[Hb, Hbm], [Hbm.T, Hm]])

    def newton_euler(self, R0, A0, AA, RR, q, v0, w0, vd0, wd0, qd, qdd, f_end=None, n_end=None):
        """Eqs 3.30-3.39: [F0; N0; tau] for given accelerations. ``f_end``/``n_end`` (3, n) are
        the loads the end points exert on the environment (eq 3.32's f_ei, n_ei)."""
        n = self.n
        f_end = np.zeros((3, n)) if f_end is None else f_end
        n_end = np.zeros((3, n)) if n_end is None else n_end
        vv, ww = self.velocities(A0, AA, q, v0, w0, qd)
        vd, wd = self.accelerations(A0, AA, q, w0, ww, vd0, wd0, qd, qdd)
        F = [self.m[i] * (vd[i] - self.g) for i in range(n)]
        N = []
        for i in range(n):
            Ii = AA[i] @ self.I[i] @ AA[i].T
            N.append(Ii @ wd[i] + np.cross(ww[i], Ii @ ww[i]))
        f = [None] * n
        nj = [None] * n
        for i in reversed(range(n)):
            slide = AA[i] @ EZ * q[i] if self.J[i] == "P" else np.zeros(3)
            cii = AA[i] @ self.cc[:, i, i]
            fi = F[i] + self.SE[i] * f_end[:, i]
            ni = N[i] + self.S[i, i] * np.cross(cii - slide, F[i])  # 3.33 / 3.35
            for j in range(i + 1, n):
                if self.S[i, j] != 0:
                    lij = AA[i] @ self.cc[:, i, j] - cii + slide
                    fi = fi + self.S[i, j] * f[j]
                    ni = ni + self.S[i, j] * (np.cross(lij, f[j]) + nj[j])
            if self.SE[i]:
                lie = AA[i] @ self.ce[:, i] - cii + slide
                ni = ni + np.cross(lie, f_end[:, i]) + n_end[:, i]
            f[i], nj[i] = fi, ni
        tau = np.array([(nj[i] if self.J[i] == "R" else f[i]) @ (AA[i] @ EZ) for i in range(n)])  # 3.36-3.37
        I0 = A0 @ self.I0 @ A0.T
        F0 = self.m0 * (vd0 - self.g)
        N0 = I0 @ wd0 + np.cross(w0, I0 @ w0)
        for i in range(n):
            if self.S0[i]:  # 3.38-3.39
                F0 = F0 + f[i]
                N0 = N0 + np.cross(A0 @ self.c0[:, i], f[i]) + nj[i]
        return np.concatenate([F0, N0, tau])

    def forward_dynamics(self, R0, A0, q, v0, w0, qd, F0, N0, tau, Fh=None, Th=None):
        """Eq 3.29 with external loads Fh/Th (3, n) applied to the robot at its end points."""
        n = self.n
        AA = self.rotations(A0, q)
        RR, PP = self.positions(R0, A0, AA, q)
        H = self.inertia_matrix(R0, A0, AA, RR, PP)
        zero3, zeron = np.zeros(3), np.zeros(n)
        bias = self.newton_euler(R0, A0, AA, RR, q, v0, w0, zero3, zero3, qd, zeron)
        force = np.concatenate([F0, N0, tau])
        if Fh is not None:
            ends = iter(self.end_points(AA, RR))
            for i in range(n):
                if self.SE[i]:
                    pe, _ = next(ends)
                    Jm = self.point_jacobian_joints(AA, PP, i, pe)
                    Jb = np.block([[np.eye(3), -tilde(pe - R0)], [np.zeros((3, 3)), np.eye(3)]])
                    wrench = np.concatenate([Fh[:, i], Th[:, i]])
                    force = force + np.concatenate([Jb.T @ wrench, Jm.T @ wrench])
        return np.linalg.solve(H, force - bias)

    # -------------------------------------------------------------------- integration
    @staticmethod
    def quaternion_dc(Q):
        """C(Qtn) (inertial -> base) of DESIGN.md."""
        x, y, z, w = Q
        return np.array(
            [
                [x * x - y * y - z * z + w * w, 2 * (x * y + z * w), 2 * (x * z - y * w)],
                [2 * (x * y - z * w), -x * x + y * y - z * z + w * w, 2 * (y * z + x * w)],
                [2 * (x * z + y * w), 2 * (y * z - x * w), -x * x - y * y + z * z + w * w],
            ]
        )

    @staticmethod
    def quaternion_rate(w0, Q):
        """dQtn of DESIGN.md for inertial w0 = (a, b, c)."""
        x, y, z, w = Q
        a, b, c = w0
        return 0.5 * np.array(
            [w * a + z * b - y * c, -z * a + w * b + x * c, y * a - x * b + w * c, -x * a - y * b - z * c]
        )

    @staticmethod
    def dc_quaternion(C):
        """A quaternion Q with quaternion_dc(Q) == C (largest-component method)."""
        x2 = 1 + C[0, 0] - C[1, 1] - C[2, 2]
        y2 = 1 - C[0, 0] + C[1, 1] - C[2, 2]
        z2 = 1 - C[0, 0] - C[1, 1] + C[2, 2]
        w2 = 1 + C[0, 0] + C[1, 1] + C[2, 2]
        k = int(np.argmax([x2, y2, z2, w2]))
        r = np.sqrt([x2, y2, z2, w2][k]) / 2
        if k == 0:
            Q = [r, (C[0, 1] + C[1, 0]) / (4 * r), (C[0, 2] + C[2, 0]) / (4 * r), (C[1, 2] - C[2, 1]) / (4 * r)]
        elif k == 1:
            Q = [(C[0, 1] + C[1, 0]) / (4 * r), r, (C[1, 2] + C[2, 1]) / (4 * r), (C[2, 0] - C[0, 2]) / (4 * r)]
        elif k == 2:
            Q = [(C[0, 2] + C[2, 0]) / (4 * r), (C[1, 2] + C[2, 1]) / (4 * r), r, (C[0, 1] - C[1, 0]) / (4 * r)]
        else:
            Q = [(C[1, 2] - C[2, 1]) / (4 * r), (C[2, 0] - C[0, 2]) / (4 * r), (C[0, 1] - C[1, 0]) / (4 * r), r]
        return np.array(Q)

    def rk4_step(self, R0, A0, v0, w0, q, qd, F0, N0, tau, dt, Fh=None, Th=None):
        """DESIGN.md's f_dyn_rk2: RK4 on (R0, Qtn, v0, w0, q, qd), stage quaternions normalised."""
        n = self.n
        Q0 = self.dc_quaternion(A0.T)

        def derivative(R, A, Q, v, w, qq, qqd):
            acc = self.forward_dynamics(R, A, qq, v, w, qqd, F0, N0, tau, Fh, Th)
            return [v, self.quaternion_rate(w, Q), acc[:3], acc[3:6], qqd, acc[6:]]

        start = [R0, Q0, v0, w0, q, qd]
        k1 = derivative(R0, A0, Q0, v0, w0, q, qd)

        def stage(k, frac):
            x = [s + frac * dt * d for s, d in zip(start, k)]
            x[1] = x[1] / np.linalg.norm(x[1])
            return derivative(x[0], self.quaternion_dc(x[1]).T, x[1], x[2], x[3], x[4], x[5])

        k2 = stage(k1, 0.5)
        k3 = stage(k2, 0.5)
        k4 = stage(k3, 1.0)
        end = [s + dt * (a + 2 * b + 2 * c + d) / 6 for s, a, b, c, d in zip(start, k1, k2, k3, k4)]
        Q = end[1] / np.linalg.norm(end[1])
        assert len(end[4]) == n
        return end[0], self.quaternion_dc(Q).T, end[2], end[3], end[4], end[5]
