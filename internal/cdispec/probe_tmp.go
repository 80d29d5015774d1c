package cdispec

import (
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

var _ = cdi.NewCache
var _ = cdispecs.MinimumRequiredVersion
