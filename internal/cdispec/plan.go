package cdispec

import "github.com/nctk/nctk/internal/plan"

// PlanFor resolves CDI device names against the spec files in specDirs
// (ResolveCached with cacheDir; "" for no cache) and returns a plan that holds their container edits verbatim
// (plan.Plan.CDI), so that the runtime applies CDI requests through the same
// spec editor as every other request (keeping the config.json fields
// runtime-spec does not know) and exactly as the CDI specification says.
func PlanFor(names, specDirs []string, cacheDir string) (*plan.Plan, error) {
	e, libs, err := ResolveCached(names, specDirs, cacheDir)
	if err != nil {
		return nil, err
	}
	return &plan.Plan{CDI: e, CDILibs: libs}, nil
}
