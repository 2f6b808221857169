"""bootstrap/kubeadm."""
