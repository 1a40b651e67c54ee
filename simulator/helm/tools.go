//go:build tools

// Package tools pins Helm's command as this module's requirement (build.sh builds it).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
