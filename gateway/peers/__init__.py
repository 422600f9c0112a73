"""Peers: other gateways on the LAN that take tickets (a second Mac, a second seat)."""
