"""The state directory of one ``colocate serve``: the SQLite database (:mod:`.store`), every row checked as it is
read and a damaged one set aside (:mod:`.rows`), the probe records kept in it (:mod:`.probe_records`), opened
safely by readers and writers (:mod:`.opening`), and the one-server lock (:mod:`.lock`)."""
