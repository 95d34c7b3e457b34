"""Source rewriting with libcst, driven by the rules in torchport.rules."""
