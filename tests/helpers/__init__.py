"""Code the tests share (as lightning-hydra-template's tests/helpers/): fixtures' building blocks,
scripts the tests start as processes, tables with known answers. Test modules import from here,
never from each other."""
