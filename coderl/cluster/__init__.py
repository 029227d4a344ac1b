"""Where rollouts run: in the trainer's process (``cluster.backend=local``) or in rollout workers on a
Ray cluster (``cluster.backend=ray``, :mod:`coderl.cluster.ray_rollouts`). Ray is imported only by the
ray backend; coderl itself never needs it."""
