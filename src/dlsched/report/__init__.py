"""Tables (:mod:`.columns`), figures (:mod:`.plots`) and the HTML report (:mod:`.html`)."""
