"""Stage 7, the gate: the configuration fingerprint, the attestation, and the policy that lets the
performance phase start only with a passing check on the live configuration."""
