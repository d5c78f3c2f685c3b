"""What comes in: intake, ingress and the one answer policy."""
