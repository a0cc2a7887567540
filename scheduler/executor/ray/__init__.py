"""Ray: whole-GPU groups routed by ``accelerator_type`` (:mod:`.backend`: one task per group for ``colocate launch``,
one detached actor per group for ``colocate serve``) and the actor tasks report their progress to
(:mod:`.progress_board`). ``ray`` is an optional extra, imported inside functions only."""
