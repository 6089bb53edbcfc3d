"""The Lockstep operator (kopf): report endpoint, judging, webhooks."""
