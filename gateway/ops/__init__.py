"""Operations: the command line, setup, doctor, knowledge-base commands."""
