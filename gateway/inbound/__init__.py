"""What comes in: the shared ingress steps, the intake, and the one answer policy."""
