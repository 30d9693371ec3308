package model

// PolicyAdvice is what the policies say about an identity and a service: whether the identity
// may dial or bind it (whatever posture the policies ask for), and the edge routers each side
// may use and the two share.
type PolicyAdvice struct {
	Identity   *Identity
	Service    *Service
	Dial, Bind bool
	// IdentityRouters and ServiceRouters count the edge routers the identity's edge router
	// policies and the service's service edge router policies name.
	IdentityRouters, ServiceRouters int
	// Common are the routers both name, in id order.
	Common []*EdgeRouter
}

// PolicyAdvice analyzes the policies between an identity and a service, as the reference's
// policy advisor does: routers count whether or not they are enrolled, enabled or online,
// so an operator sees which policy to adjust.
func (m *Model) PolicyAdvice(identityID, serviceID string) (*PolicyAdvice, error) {
	ident, err := m.Identity(identityID)
	if err != nil {
		return nil, err
	}
	svc, err := m.Service(serviceID)
	if err != nil {
		return nil, err
	}
	idx, err := m.policies()
	if err != nil {
		return nil, err
	}
	i, s, err := idx.pair(identityID, serviceID)
	if err != nil {
		return nil, err
	}
	out := &PolicyAdvice{Identity: ident, Service: svc,
		Dial: len(idx.grantsFor(identityID, serviceID, PolicyDial)) > 0,
		Bind: len(idx.grantsFor(identityID, serviceID, PolicyBind)) > 0}
	n := len(idx.routers.ids)
	mine, theirs := granted(idx.erp, i, n), granted(idx.serp, s, n)
	mine.each(func(int) { out.IdentityRouters++ })
	theirs.each(func(int) { out.ServiceRouters++ })
	mine.and(theirs)
	mine.each(func(r int) { out.Common = append(out.Common, idx.routerRec[r]) })
	return out, nil
}
