"""Operating the gateway: the command line, setup, doctor and the generated reference docs."""
